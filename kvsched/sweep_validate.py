"""Resolve and check sweep axes against the real config, before any simulation starts.

The base config is resolved for each arm, dumped to JSON types and *expanded*: every policy's
and the workload's `params` are filled with their Params defaults, so an axis path such as
`policies.eviction.params.half_life_s` exists exactly when the policy really has that parameter.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from pydantic import ValidationError

from kvsched.experiment import BUILTIN_ARMS, resolve_arms
from policies.registry import CONFIG_KINDS, REGISTRY, make_policy
from sim.config import ConfigError, ExperimentConfig, format_validation_error, parse_config
from sim.strict_input import number_error
from workloads.registry import WORKLOADS

ARM_AXIS = "arm"  # the one axis that is not a config path: which arm's overrides the point runs


def _params_model(section: tuple[str, ...], name: str):
    """The Params model of the named policy (section ("policies", kind)) or workload, or None."""
    if section == ("workload",):
        return WORKLOADS[name][0] if name in WORKLOADS else None
    if len(section) == 2 and section[0] == "policies" and section[1] in REGISTRY:
        cls = REGISTRY[section[1]].get(name)
        return cls.Params if cls is not None else None
    return None


def validate(config: dict, source: str = "config") -> ExperimentConfig:
    """Everything a simulation would reject at start-up: schema, policy and workload params,
    and whether the model's weights fit the node."""
    cfg = parse_config(config, source=source)
    rng = np.random.default_rng(0)
    for kind in CONFIG_KINDS:
        make_policy(kind, getattr(cfg.policies, kind), rng)
    params_model = _params_model(("workload",), cfg.workload.name)
    if params_model is None:
        raise ConfigError(
            f"workload.name: unknown workload {cfg.workload.name!r}; "
            f"allowed: {', '.join(sorted(WORKLOADS))}"
        )
    found = number_error(params_model, cfg.workload.params)
    if found:
        raise ConfigError(f"workload.params.{found}")
    try:
        params_model.model_validate(cfg.workload.params)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix="workload.params.")) from None
    _ = cfg.kv_capacity_bytes
    return cfg


def expand(cfg: ExperimentConfig) -> dict:
    """JSON dump of a valid config with every params dict filled with its defaults; no arms."""
    d = cfg.model_dump(mode="json")
    d["arms"] = {}
    for kind in CONFIG_KINDS:
        spec = d["policies"][kind]
        spec["params"] = (
            _params_model(("policies", kind), spec["name"])
            .model_validate(spec["params"])
            .model_dump(mode="json")
        )
    d["workload"]["params"] = (
        _params_model(("workload",), d["workload"]["name"])
        .model_validate(d["workload"]["params"])
        .model_dump(mode="json")
    )
    return d


def set_path(d: dict, path: str, value: Any) -> None:
    """Set a dotted path; renaming a {name, params} spec resets params (as config.deep_merge)."""
    *parents, last = path.split(".")
    node = d
    for seg in parents:
        if not isinstance(node.get(seg), dict):
            node[seg] = {}
        node = node[seg]
    if last == "name" and "params" in node and node.get("name") != value:
        node["params"] = {}
    node[last] = copy.deepcopy(value)


class Resolver:
    """Per-arm expanded bases; builds and checks point configs."""

    def __init__(self, base: dict, arm: str | None, axes: dict[str, list]):
        self.axes = axes
        self.arms = self._arms(base, arm)
        self.expanded = {}
        for name in self.arms:
            try:
                d = resolve_arms(base, [name])[name].model_dump(mode="json")
                d["arms"] = {}
                self.expanded[name] = expand(validate(d, source=f"arm {name}"))
            except ConfigError as err:
                raise ConfigError(f"base: {err}") from None

    def _arms(self, base: dict, arm: str | None) -> list[str]:
        own = list(base.get("arms") or {})
        allowed = list(dict.fromkeys([*BUILTIN_ARMS, *own]))
        if ARM_AXIS in self.axes:
            names, field = [str(a) for a in self.axes[ARM_AXIS]], f"axes.{ARM_AXIS}"
        elif arm is not None:
            names, field = [arm], "arm"
        elif len(own) > 1:
            raise ConfigError(
                f"arm: the base config has arms {', '.join(own)}; name one with `arm:` "
                f"or sweep them with an `{ARM_AXIS}` axis"
            )
        else:
            names, field = (own or ["engine"]), "arm"
        for name in names:
            if name not in allowed:
                raise ConfigError(f"{field}: unknown arm {name!r}; allowed: {', '.join(allowed)}")
        return names

    # -- paths ---------------------------------------------------------------------------------
    def check_paths(self) -> None:
        for path in self.axes:
            if path == ARM_AXIS:
                continue
            if path.split(".")[0] == "arms":
                raise ConfigError(
                    f"axes.{path}: arms are not swept by path; use an `{ARM_AXIS}` axis"
                )
            self._check_path(path)

    def _check_path(self, path: str) -> None:
        node: Any = self.expanded[self.arms[0]]
        prefix: list[str] = []
        for seg in path.split("."):
            keys = self._keys_at(tuple(prefix), node)
            if keys is None:
                raise ConfigError(f"axes.{path}: {'.'.join(prefix)} is a value, not a section")
            if seg not in keys:
                where = ".".join(prefix) or "the config"
                raise ConfigError(
                    f"axes.{path}: no field {seg!r} in {where}; "
                    f"allowed: {', '.join(sorted(keys)) or '(none)'}"
                )
            node = node.get(seg) if isinstance(node, dict) else None
            prefix.append(seg)

    def _keys_at(self, prefix: tuple[str, ...], node: Any) -> set[str] | None:
        if prefix and prefix[-1] == "params":
            keys = set()
            for name in self._candidate_names(prefix[:-1]):
                model = _params_model(prefix[:-1], name)
                keys |= set(model.model_fields) if model is not None else set()
            return keys
        return set(node) if isinstance(node, dict) else None

    def _candidate_names(self, section: tuple[str, ...]) -> set[str]:
        """Names the section (a policy kind or the workload) takes anywhere in the sweep."""
        dotted = ".".join(section)
        names = set()
        for d in self.expanded.values():
            node = d
            for seg in section:
                node = node[seg]
            names.add(node["name"])
        names |= {str(v) for v in self.axes.get(dotted + ".name", [])}
        names |= {str(v.get("name")) for v in self.axes.get(dotted, []) if isinstance(v, dict)}
        return names

    # -- values --------------------------------------------------------------------------------
    def point_config(self, values: dict[str, Any]) -> tuple[str, dict]:
        """(arm, normalised config) of one point; ConfigError if the config rejects it."""
        arm = str(values.get(ARM_AXIS, self.arms[0]))
        d = copy.deepcopy(self.expanded[arm])
        for path in sorted((p for p in values if p != ARM_AXIS), key=lambda p: p.count(".")):
            set_path(d, path, values[path])
        return arm, expand(validate(d, source="point"))

    def check_values(self) -> None:
        """Each value of each axis against an anchor point (every other axis at its first value),
        so an error names the one axis and value to blame."""
        anchor = {path: values[0] for path, values in self.axes.items()}
        built: dict[str, Any] = {}
        for path in sorted(self.axes, key=lambda p: p.count(".")):
            built[path] = anchor[path]
            self._try(built, path)
        for path, values in self.axes.items():
            for value in values[1:]:
                self._try({**anchor, path: value}, path)

    def _try(self, values: dict[str, Any], path: str) -> None:
        try:
            self.point_config(values)
        except ConfigError as err:
            msg = str(err).removeprefix("point: ")
            raise ConfigError(f"axes.{path}: value {values[path]!r}: {msg}") from None
