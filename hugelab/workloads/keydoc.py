"""docs/kinds.md, generated from the kinds' declarations (`Kind.keys`, the workload dataclass's
fields and defaults): `python -m hugelab.workloads.keydoc > docs/kinds.md`."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from hugelab.workloads.kind import ARM_KEYS, PLACES, Kind, app_words, file_fields
from hugelab.workloads.registry import kinds

TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "true or false",
         "tuple[str, ...]": "list of strings", "tuple[tuple[str, Any], ...]": "table"}


def fields(kind: Kind) -> dict[str, dataclasses.Field[Any]]:
    """The fields an experiment file may set: the dataclass's, less INTERNAL ones."""
    return {f.name: f for f in file_fields(kind.workload)}


def _type(hint: Any) -> str:
    """`int | None` -> 'integer (optional)', Literal['a', 'b'] -> 'one of "a", "b"'."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(f'"{a}"' for a in args)
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        said = " or ".join(_type(a) for a in args if a is not type(None))
        return f"{said} (optional)" if type(None) in args else said
    name = getattr(hint, "__name__", None) if typing.get_origin(hint) is None else None
    return TYPES.get(name or str(hint).replace("typing.", ""), str(hint))


def _default(f: dataclasses.Field[Any]) -> str:
    value = f.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and str(f.type).startswith("tuple[tuple"):
        return "{}"  # a table: app = { ... }
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]" if value else "[]"
    if isinstance(value, str):
        return f'"{value}"'
    return f"{value:_}".replace("_", ",") if isinstance(value, int) else f"{value:g}"


def kind_section(kind: Kind) -> list[str]:
    where = ", ".join(PLACES[w] for w in ("host", "guest", "domain", "interleaved")
                      if w in kind.where)
    tools = ", ".join(f"`{t.name}` ({t.package})" for t in kind.tools) or "none beyond Python"
    out = [f"## {kind.name}", "", f"{kind.summary}.", "",
           f"Runs {where}. Programs: {tools}.", ""]
    by_name, hints = fields(kind), typing.get_type_hints(kind.workload)
    for key in kind.keys:
        f = by_name[key.name]
        unit = f", in {key.unit}" if key.unit else ""
        where = ", set by each arm, not in `[workload]`" if key.name in ARM_KEYS else ""
        known = "" if key.name not in ARM_KEYS or not kind.app else " Settings: " + "; ".join(
            f"`{name}` ({app_words(want)})" for name, want in kind.app.items()) + "."
        out.append(f"- `{key.name}` ({_type(hints[key.name])}, default `{_default(f)}`{unit}"
                   f"{where}): {key.doc}.{known}")
    return out + [""]


def render() -> str:
    parts = ["# Workload kinds and their keys", "",
             "Generated from the kinds' own declarations (`KIND = Kind(...)`, the `keys` and "
             "the workload's fields and defaults) by `python -m hugelab.workloads.keydoc > "
             "docs/kinds.md`; a test checks that it is up to date and that every key a file "
             "may set is here. A `[workload]` table names its kind (`kind = \"redis\"`) and "
             "sets any of these keys but `app`, the application's own settings, which each "
             "arm sets (`app = { ... }` in `[[arms]]`, `[base]` or a factor); "
             "[experiments.md](experiments.md) says how arms and scenarios vary them.", ""]
    for name in sorted(kinds()):
        parts += kind_section(kinds()[name])
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
