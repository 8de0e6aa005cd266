"""Sweep specification: a base config, axes over dotted config paths, and the points they span.

A sweep file (YAML or JSON):
  name: page_size_study
  base: {path: configs/seed.yaml}      # or an inline experiment config
  arm: engine                          # the one arm each point runs (default: the base's only arm, else engine)
  axes:                                # dotted config path -> values; `arm` sweeps arms
    cache.page_size: [8, 16, 32, 64]
    policies.routing.params.load_threshold: [0.8, 0.9]
    seed: [1, 2, 3]
  sampling: grid                       # or random: `budget` points drawn from the grid
  budget: 100

A point is the base resolved for its arm (kvsched.experiment.resolve_arms), with each axis value set
at its path. Everything is checked here, before any simulation: an unknown path, an empty axis, a
duplicate or a value the config rejects is a ConfigError naming the axis.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvsched.sweep_validate import ARM_AXIS, Resolver
from sim.config import ConfigError, format_validation_error, load_config_file
from sim.strict_input import number_error


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "sweep"
    base: dict[str, Any] = Field(default_factory=dict)
    arm: str | None = None
    axes: dict[str, list[Any]]
    sampling: Literal["grid", "random"] = "grid"
    budget: int | None = Field(default=None, gt=0)
    sampling_seed: int = 0


MAX_GRID_POINTS = 100_000  # points in a sweep's grid (each is one simulation)


@dataclass(frozen=True, slots=True)
class Point:
    index: int  # position in the full grid (last axis fastest); stable across samplings and runs
    values: dict[str, Any]  # axis path -> value
    arm: str
    config: dict  # the fully resolved experiment config (JSON types) the worker simulates
    point_id: str  # hash of (arm, config): a re-run recognises a point by what it simulates


@dataclass(frozen=True, slots=True)
class Sweep:
    spec: SweepSpec
    base: dict  # the base config as loaded (path references read)
    points: list[Point]
    grid_size: int

    @property
    def axes(self) -> list[str]:
        return list(self.spec.axes)


def parse_sweep(data: dict, source_dir: Path = Path(".")) -> Sweep:
    """Validate a sweep mapping and plan its points; raises ConfigError naming the axis."""
    found = number_error(SweepSpec, data)
    if found:
        raise ConfigError(found)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
    base = _load_base(spec.base, source_dir)
    _check_axes_shape(spec)
    _check_grid_size(spec)
    resolver = Resolver(base, spec.arm, spec.axes)
    resolver.check_paths()
    resolver.check_values()
    size = math.prod(len(v) for v in spec.axes.values())
    indices = _sample(spec, size)
    points = [_make_point(spec, resolver, i) for i in indices]
    _check_distinct(points)
    return Sweep(spec=spec, base=base, points=points, grid_size=size)


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    return parse_sweep(load_config_file(path, flag="SWEEP"), path.parent)


def _load_base(base: dict, source_dir: Path) -> dict:
    if set(base) != {"path"}:
        return base  # inline config (ExperimentConfig has no `path` field, so no ambiguity)
    return load_config_file(source_dir / str(base["path"]), flag="base.path")


def _check_axes_shape(spec: SweepSpec) -> None:
    if not spec.axes:
        raise ConfigError(
            "axes: no axes; give at least one dotted config path with a list of values"
        )
    paths = list(spec.axes)
    for path, values in spec.axes.items():
        if not values:
            raise ConfigError(f"axes.{path}: empty axis; give at least one value")
        seen = set()
        for v in values:
            key = json.dumps(v, sort_keys=True, default=str)
            if key in seen:
                raise ConfigError(f"axes.{path}: duplicate value {v!r}")
            seen.add(key)
        for other in paths:
            if other != path and other.startswith(path + "."):
                raise ConfigError(f"axes.{other}: overlaps axis {path}; sweep one or the other")
    if spec.sampling == "grid" and spec.budget is not None:
        size = math.prod(len(v) for v in spec.axes.values())
        if size > spec.budget:
            raise ConfigError(
                f"budget: the grid has {size} points, above budget {spec.budget}; "
                "raise budget or use sampling: random"
            )


def _check_grid_size(spec: SweepSpec) -> None:
    size = math.prod(len(v) for v in spec.axes.values())
    if size > MAX_GRID_POINTS:
        raise ConfigError(
            f"axes: the grid has {size:,} points, above the bound of {MAX_GRID_POINTS:,}; "
            "sweep fewer values"
        )
    if spec.budget is not None and spec.budget > MAX_GRID_POINTS:
        raise ConfigError(f"budget: {spec.budget:,} is above the bound of {MAX_GRID_POINTS:,}")


def _sample(spec: SweepSpec, size: int) -> list[int]:
    if spec.sampling == "grid" or spec.budget is None or spec.budget >= size:
        if spec.sampling == "random" and spec.budget is None:
            raise ConfigError("budget: sampling: random needs a budget (number of points)")
        return list(range(size))
    rng = np.random.default_rng(spec.sampling_seed)
    return sorted(int(i) for i in rng.choice(size, size=spec.budget, replace=False))


def grid_values(axes: dict[str, list], index: int) -> dict[str, Any]:
    """The axis values of grid point `index` (mixed radix, last axis fastest, as itertools.product)."""
    out = {}
    for path, values in reversed(axes.items()):
        index, digit = divmod(index, len(values))
        out[path] = values[digit]
    return dict(reversed(out.items()))


def _make_point(spec: SweepSpec, resolver: Resolver, index: int) -> Point:
    values = grid_values(spec.axes, index)
    try:
        arm, config = resolver.point_config(values)
    except ConfigError as err:
        where = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise ConfigError(
            f"axes: the point {where} is invalid: {str(err).removeprefix('point: ')}"
        ) from None
    return Point(index=index, values=values, arm=arm, config=config, point_id=point_id(arm, config))


def point_id(arm: str, config: dict) -> str:
    text = json.dumps({"arm": arm, "config": config}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_distinct(points: list[Point]) -> None:
    by_id: dict[str, Point] = {}
    for p in points:
        if p.point_id in by_id:
            first = by_id[p.point_id]
            axis = next((k for k in p.values if p.values[k] != first.values[k]), ARM_AXIS)
            raise ConfigError(
                f"axes.{axis}: values {first.values.get(axis)!r} and {p.values.get(axis)!r} "
                "give the same config"
            )
        by_id[p.point_id] = p
