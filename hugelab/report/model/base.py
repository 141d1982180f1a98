"""A report part: a dataclass whose JSON is its fields, in order, recursively.

`to_json` gives the part's JSON-ready dict (values are kept JSON-safe from the start: no NaN,
no numpy scalars, None where a number is missing); `from_json` builds the part back from such
a dict, nested parts included, from the fields' type hints.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any, ClassVar, Self, Union, get_args, get_origin, get_type_hints

import numpy as np


def clean(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, non-finite floats to None, tuples to lists."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [clean(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def jsonify(obj: Any) -> Any:
    """A part, or lists and dicts of parts, as plain JSON values."""
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if isinstance(obj, list | tuple):
        return [jsonify(v) for v in obj]
    if isinstance(obj, dict):
        return {k: jsonify(v) for k, v in obj.items()}
    return obj


def _convert(hint: Any, value: Any) -> Any:
    """`value` (plain JSON) as `hint` says: a part from its dict, lists and maps of parts."""
    if value is None:
        return None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [a for a in get_args(hint) if a is not type(None)]
        return _convert(parts[0], value) if len(parts) == 1 else value
    if origin is list:
        (item,) = get_args(hint)
        return [_convert(item, v) for v in value]
    if origin is dict:
        _, item = get_args(hint)
        return {k: _convert(item, v) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, Model) and isinstance(value, Mapping):
        return hint.from_json(value)
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


class Model:
    """Base of every report part (each a dataclass). `OMIT`: keys left out of the JSON when
    their value is None (they were absent from the report's JSON then)."""

    OMIT: ClassVar[frozenset[str]] = frozenset()

    def to_json(self) -> dict[str, Any]:
        assert is_dataclass(self)
        return {f.name: jsonify(getattr(self, f.name)) for f in fields(self)
                if not (f.name in self.OMIT and getattr(self, f.name) is None)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Self:
        """The part from its JSON; a key the JSON lacks takes the field's default."""
        assert is_dataclass(cls)
        hints = _hints(cls)
        return cls(**{f.name: _convert(hints[f.name], d[f.name])
                      for f in fields(cls) if f.name in d})
