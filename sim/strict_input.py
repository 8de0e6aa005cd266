"""Strict reading of user input: config files and the numbers in them.

- YAML is read with libyaml's C loader when it is installed (a 65 MB file in seconds, not
  minutes), and a mapping that repeats a key is an error (YAML's "last one wins" hides typos).
- Aliases may expand a small file into a huge tree (the "billion laughs"): a loaded document may
  hold at most MAX_CONFIG_VALUES values, counted as expanded.
- A bool is not a number (`num_nodes: true` is not 1), and a float must be finite.
"""

from __future__ import annotations

import math
import types
import typing
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel

MAX_CONFIG_BYTES = 16 * 2**20  # a config or sweep file larger than this is refused unread
MAX_CLIENTS = 100_000  # closed-loop clients of one workload (each is a simulated process)
MAX_CONFIG_VALUES = 1_000_000  # scalars + containers in a loaded document, aliases expanded

if TYPE_CHECKING:
    _Base = yaml.SafeLoader
else:
    _Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when built with libyaml


class UniqueKeyLoader(_Base):
    """yaml's safe loader (the C one when available) that rejects a key given twice in a mapping."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base constructor reports it
                break
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {first})",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, UniqueKeyLoader.construct_mapping
)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def yaml_error_text(err: yaml.YAMLError) -> str:
    """One line: what is wrong and where (yaml's own text spans several lines)."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


def reject_duplicate_json_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads object_pairs_hook: a key given twice is an error, as in YAML."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def count_values(data: Any, limit: int = MAX_CONFIG_VALUES) -> int:
    """Values in `data` with shared (aliased) parts counted each time they appear; stops past
    `limit` (returns limit + 1) so a bomb is never walked in full."""
    count, stack = 0, [data]
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            return count
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return count


def non_finite_path(data: Any, prefix: str = "") -> str | None:
    """The dotted path of the first NaN or infinite float in a plain tree, or None."""
    if isinstance(data, float) and not math.isfinite(data):
        return prefix or "value"
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list | tuple)
        else ()
    )
    for key, value in items:
        found = non_finite_path(value, f"{prefix}.{key}" if prefix else str(key))
        if found:
            return found
    return None


def _numeric_kinds(annotation: Any) -> tuple[bool, bool]:
    """(is a number field, also accepts bool) for a field annotation."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        kinds = [_numeric_kinds(a) for a in args]
        return any(k[0] for k in kinds), any(k[1] for k in kinds)
    if origin is typing.Annotated:
        return _numeric_kinds(args[0])
    return annotation in (int, float), annotation is bool


def _model_of(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *typing.get_args(annotation)]
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


def number_error(model: type[BaseModel], data: Any, prefix: str = "") -> str | None:
    """'field: message' for the first bool given as a number, or number-like text that is not
    finite ("inf", "nan"), in `data` read against `model`'s fields (nested models too); None if
    there is none. Free-form sections (dict[str, Any]) are checked when their own model reads them.
    """
    if not isinstance(data, dict):
        return None
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in data:
            continue
        value, where = data[key], f"{prefix}{key}"
        numeric, takes_bool = _numeric_kinds(info.annotation)
        if numeric and not takes_bool and isinstance(value, bool):
            return f"{where}: must be a number, not {str(value).lower()}"
        if numeric and isinstance(value, str) and not _finite_text(value):
            return f"{where}: must be a finite number, not {value!r}"
        if numeric and isinstance(value, float) and not math.isfinite(value):
            return f"{where}: must be a finite number, not {value}"
        sub = _model_of(info.annotation)
        if sub is not None:
            found = number_error(sub, value, where + ".")
            if found:
                return found
    return None


def _finite_text(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return True  # not a number at all: the model's own message says so
