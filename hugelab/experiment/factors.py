"""Factorial experiments: `[factors]` and `[scenarios]` tables -> one arm per cell. Pure.

    [factors]                       # arm factors: compared with each other
    thp = ["never", "always"]       # a list sweeps one arm setting (thp, thp_defrag, backing,
    vm.prealloc = [false, true]     # pools, process_thp, thp_max_ptes_none,
    app.huge_pages = ["off", "on"]  # thp_shrink_underused, memory_limit, vm.<key>, guest.thp,
                                    # guest.pools, app.<setting>: an application switch)
    [factors.qemu]                  # a table of named levels sets several keys at once
    anon = { vm = { backing = "anon" } }
    hugetlbfs = { vm = { backing = "file", page_size = "2M" } }

    [scenarios]                     # workload parameters: each combination is a scenario
    workers = [1, 4]

    [base]                          # settings every cell starts from (any arm key)
    backing = "4k"

Every combination of levels is a cell (or only those `cells = [{...}, ...]` lists), named
`thp=always,qemu=hugetlbfs [workers=4]`. A cell is an ordinary Arm (validated like one) that also
carries its levels and its scenario's workload values. `baseline = { qemu = "anon" }` picks the
baseline levels (default: each factor's first level). `[scenarios]` also works beside a flat
`[[arms]]` list: then the arms are the levels of one factor, `arm`.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from typing import Any

from hugelab.errors import ExperimentError
from hugelab.experiment.model import Arm, Factor

SETTING_KEYS = {"backing", "thp", "thp_defrag", "pools", "process_thp", "thp_max_ptes_none",
                "thp_shrink_underused", "memory_limit", "host_state", "fragment"}
TABLES = ("vm", "guest", "app")  # arm keys that are tables: swept by their dotted keys
VM_FACTOR_KEYS = {"backing", "page_size", "prealloc", "share", "mem", "vcpus", "numa_node",
                  "cpu_pin", "kernel", "accel", "mthp"}
GUEST_FACTOR_KEYS = {"thp", "pools", "mthp"}
FACTOR_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,40}")
LEVEL_NAME = re.compile(r"[A-Za-z0-9_.+\-=/]{1,60}")
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", re.IGNORECASE)


class Levels:
    """One factor as parsed: its Factor, and the arm settings (or workload values) per level."""

    def __init__(self, factor: Factor, settings: list[dict[str, Any]]) -> None:
        self.factor = factor
        self.settings = settings


def _fail(msg: str, hint: str | None = None) -> ExperimentError:
    return ExperimentError(msg, hint=hint)


def level_name(value: Any) -> str:
    """A level's name from its value: true/false, 4, "2M=64+1G=1", "none" (never a comma:
    commas separate the factors of a cell's name)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "+".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return "+".join(str(v) for v in value) or "none"
    return str(value)


def _nest(path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _check_path(path: str) -> None:
    head, _, rest = path.partition(".")
    if head in SETTING_KEYS and not rest:
        return
    allowed = {"vm": VM_FACTOR_KEYS, "guest": GUEST_FACTOR_KEYS}.get(head)
    if allowed is not None and rest in allowed:
        return
    if head == "app" and rest and "." not in rest:  # the workload kind checks its keys
        return
    known = sorted([*SETTING_KEYS, *(f"vm.{k}" for k in VM_FACTOR_KEYS),
                    *(f"guest.{k}" for k in GUEST_FACTOR_KEYS), "app.<setting>"])
    raise _fail(f"[factors] {path}: not an arm setting a factor can sweep",
                hint=f"sweep one of: {', '.join(known)}; or give named levels, "
                "e.g. [factors.qemu] anon = {{ vm = {{ backing = \"anon\" }} }}")


def _distinct(name: str, names: list[str]) -> None:
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _fail(f"factor '{name}' has the level {dup[0]} twice")
    if len(names) < 1:
        raise _fail(f"factor '{name}' has no levels")
    for n in names:
        if not LEVEL_NAME.fullmatch(n):
            raise _fail(f"factor '{name}': level name {n!r} must be 1-60 letters, digits or "
                        "'_.+-=/'")


def _flatten(prefix: str, value: dict[str, Any]) -> list[tuple[str, Any]]:
    """`vm.backing = [...]` arrives as {"vm": {"backing": [...]}}: back to dotted paths."""
    return [(f"{prefix}.{k}", v) for k, v in value.items()]


def _swept(path: str, values: Any) -> Levels:
    _check_path(path)
    if not isinstance(values, list) or not values:
        raise _fail(f"[factors] {path} needs a list of levels, e.g. {path} = [\"a\", \"b\"]")
    names = [level_name(v) for v in values]
    _distinct(path, names)
    return Levels(Factor(path, tuple(names)), [_nest(path, v) for v in values])


def _named(name: str, table: dict[str, Any]) -> Levels:
    names = list(table)
    _distinct(name, names)
    settings = []
    for level, s in table.items():
        if not isinstance(s, dict):
            raise _fail(f"[factors.{name}] {level} must be a table of arm settings, "
                        f"e.g. {level} = {{ thp = \"always\" }}")
        for key, v in s.items():
            if key in TABLES and isinstance(v, dict):
                for sub in v:
                    _check_path(f"{key}.{sub}")
            else:
                _check_path(key)
        settings.append(s)
    return Levels(Factor(name, tuple(names)), settings)


def parse_factors(raw: Any) -> list[Levels]:
    """The `[factors]` table, in file order."""
    if not isinstance(raw, dict) or not raw:
        raise _fail("[factors] must be a table of factors",
                    hint="e.g. thp = [\"never\", \"always\"]")
    out: list[Levels] = []
    for name, value in raw.items():
        if not FACTOR_NAME.fullmatch(name):
            raise _fail(f"[factors] {name!r}: a factor name is 1-40 letters, digits or '_.-'")
        if name in ("baseline", "cells"):
            raise _fail(f"[factors] {name}: {name} is a top-level key",
                        hint=f"put `{name} = ...` above the first table ([factors], [workload])")
        if name == "arm":
            raise _fail("[factors] arm: the name 'arm' is reserved for a flat [[arms]] list "
                        "swept by [scenarios]", hint="name the factor something else")
        layer = {"vm": VM_FACTOR_KEYS, "guest": GUEST_FACTOR_KEYS}.get(name)
        if isinstance(value, list):
            out.append(_swept(name, value))
        elif isinstance(value, dict) and not value:
            raise _fail(f"[factors] {name} is empty: give its levels")
        elif isinstance(value, dict) and name == "app" and \
                all(isinstance(v, list) for v in value.values()):
            out += [_swept(path, v) for path, v in _flatten(name, value)]  # app.huge_pages = [...]
        elif isinstance(value, dict) and layer is not None and (
                set(value) <= layer or not any(isinstance(v, dict) for v in value.values())):
            out += [_swept(path, v) for path, v in _flatten(name, value)]  # vm.prealloc = [...]
        elif isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
            out.append(_named(name, value))
        else:
            raise _fail(f"[factors] {name}: give a list of levels or a table of named levels",
                        hint=f"{name} = [\"a\", \"b\"], or [factors.{name}] with one table of "
                        "arm settings per level")
    if not out:
        raise _fail("[factors] declares no factor")
    return out


def _position(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    m = SIZE.fullmatch(str(value).strip())
    if m and isinstance(value, str):
        return float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ")
    return None


def parse_scenarios(raw: Any) -> list[Levels]:
    """The `[scenarios]` table: workload parameter -> list of values."""
    if not isinstance(raw, dict) or not raw:
        raise _fail("[scenarios] must be a table of workload parameters, e.g. workers = [1, 4]")
    out = []
    for key, values in raw.items():
        if not FACTOR_NAME.fullmatch(key):
            raise _fail(f"[scenarios] {key!r}: a parameter name is 1-40 letters, digits or '_.-'")
        if key == "kind":
            raise _fail("[scenarios] cannot sweep the workload kind",
                        hint="write one experiment file per workload kind")
        if not isinstance(values, list) or not values or \
                any(isinstance(v, dict | list) for v in values):
            raise _fail(f"[scenarios] {key} needs a list of values, e.g. {key} = [1, 4]")
        names = [level_name(v) for v in values]
        _distinct(key, names)
        pos = [_position(v) for v in values]
        ordered = len(values) > 1 and all(p is not None for p in pos)
        out.append(Levels(Factor(key, tuple(names), scenario=True, ordered=ordered,
                                 positions=tuple(p or 0.0 for p in pos) if ordered else ()),
                          [{key: v} for v in values]))
    return out


def _merge(into: dict[str, Any], add: dict[str, Any], owner: dict[str, str], factor: str) -> None:
    """Deep-merge a level's settings; two factors setting one key is an error."""
    for key, value in add.items():
        if key in TABLES and isinstance(value, dict):
            sub = into.setdefault(key, {})
            if not isinstance(sub, dict):
                raise _fail(f"factor '{factor}': {key} must be a table")
            for k, v in value.items():
                _claim(owner, f"{key}.{k}", factor)
                sub[k] = v
        else:
            _claim(owner, key, factor)
            into[key] = value


def _claim(owner: dict[str, str], key: str, factor: str) -> None:
    if key in owner and owner[key] != factor:
        raise _fail(f"factors '{owner[key]}' and '{factor}' both set {key}",
                    hint="one setting belongs to one factor; merge them into named levels")
    owner[key] = factor


def _pick(raw: Any, levels: list[Levels], what: str) -> dict[str, str]:
    """A {factor: level} table (baseline, or an entry of `cells`), checked."""
    if not isinstance(raw, dict):
        raise _fail(f"{what} must be a table of factor = level, e.g. {{ thp = \"never\" }}")
    by_name = {lv.factor.name: lv.factor for lv in levels}
    items: list[tuple[str, Any]] = []
    for name, level in raw.items():
        nested = name not in by_name and isinstance(level, dict)
        items += _flatten(name, level) if nested else [(name, level)]
    out = {}
    for key, level in items:
        if key not in by_name:
            raise _fail(f"{what} names '{key}', which is not a factor",
                        hint=f"factors: {', '.join(by_name)}")
        value = level_name(level)
        if value not in by_name[key].levels:
            raise _fail(f"{what}: '{value}' is not a level of factor '{key}'",
                        hint=f"levels: {', '.join(by_name[key].levels)}")
        out[key] = value
    return out


def _baseline_first(levels: list[Levels], baseline: dict[str, str]) -> list[Levels]:
    out = []
    for lv in levels:
        f = lv.factor
        want = baseline.get(f.name)
        if want is None or f.scenario:
            out.append(lv)
            continue
        i = f.levels.index(want)
        order = [i, *(j for j in range(len(f.levels)) if j != i)]
        out.append(Levels(replace(f, levels=tuple(f.levels[j] for j in order)),
                          [lv.settings[j] for j in order]))
    return out


def cell_name(arm_part: list[tuple[Factor, str]], scenario: list[str]) -> str:
    """`thp=always,qemu=hugetlbfs [workers=4]`; a flat arm keeps its own name."""
    name = ",".join(level if f.name == "arm" else f"{f.name}={level}" for f, level in arm_part)
    return f"{name} [{','.join(scenario)}]" if scenario else name


def expand(levels: list[Levels], base: dict[str, Any], cells: Any, baseline: Any,
           make_arm: Any) -> tuple[tuple[Arm, ...], tuple[Factor, ...], str]:
    """Every cell (or the listed ones) as an Arm, the factors, and the baseline cell's name.
    `make_arm(name, settings)` validates one cell's settings as an arm (arm factor 'arm' levels
    carry a ready Arm in settings["__arm__"])."""
    names = [lv.factor.name for lv in levels]
    if len(set(names)) < len(names):
        raise _fail(f"factor '{next(n for n in names if names.count(n) > 1)}' is declared twice "
                    "(in [factors] and [scenarios]?)")
    pick = _pick(baseline, levels, "baseline") if baseline is not None else {}
    scen = [k for k in pick if any(lv.factor.name == k and lv.factor.scenario for lv in levels)]
    if scen:
        raise _fail(f"baseline names '{scen[0]}', a scenario: every scenario has its own "
                    "baseline cell", hint="name only [factors] in baseline")
    levels = _baseline_first(levels, pick)
    wanted = [_pick(c, levels, "cells entry") for c in cells] if cells is not None else None
    if cells is not None and not wanted:
        raise _fail("cells is empty: list the cells to run, or leave it out for every cell")
    arms = []
    for combo in itertools.product(*(range(len(lv.factor.levels)) for lv in levels)):
        chosen = {lv.factor.name: lv.factor.levels[i] for lv, i in zip(levels, combo, strict=True)}
        if wanted is not None and not any(all(chosen[k] == v for k, v in w.items())
                                          for w in wanted):
            continue
        arms.append(_cell(levels, combo, base, make_arm))
    if not arms:
        raise _fail("no cell is left: the cells list matches none of the factors' combinations")
    base_levels = {lv.factor.name: lv.factor.levels[0] for lv in levels if not lv.factor.scenario}
    first = next((a for a in arms if all(dict(a.levels)[k] == v for k, v in base_levels.items())),
                 None)
    if first is None:
        raise _fail("the baseline cell (" + ", ".join(f"{k}={v}" for k, v in base_levels.items())
                    + ") is not among the cells", hint="add it to cells, or choose another baseline")
    missing = [a.name for a in arms if not any(
        dict(b.levels) == {**dict(a.levels), **base_levels} for b in arms)]
    if missing:
        raise _fail(f"cell '{missing[0]}' has no baseline cell in its scenario",
                    hint="every scenario needs the baseline levels; add them to cells")
    return tuple(arms), tuple(lv.factor for lv in levels), first.name


def _cell(levels: list[Levels], combo: tuple[int, ...], base: dict[str, Any],
          make_arm: Any) -> Arm:
    settings: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    owner: dict[str, str] = {}
    workload: list[tuple[str, Any]] = []
    arm_part: list[tuple[Factor, str]] = []
    scenario: list[str] = []
    ready: Arm | None = None
    for lv, i in zip(levels, combo, strict=True):
        f, s = lv.factor, lv.settings[i]
        if f.scenario:
            workload += list(s.items())
            if len(f.levels) > 1:  # a one-value scenario is the same for every cell
                scenario.append(f"{f.name}={f.levels[i]}")
            continue
        arm_part.append((f, f.levels[i]))
        if "__arm__" in s:
            ready = s["__arm__"]
        else:
            _merge(settings, s, owner, f.name)
    name = cell_name(arm_part, scenario)
    arm = ready if ready is not None else make_arm(name, settings)
    return replace(arm, name=name,
                   levels=tuple((lv.factor.name, lv.factor.levels[i])
                                for lv, i in zip(levels, combo, strict=True)),
                   workload=tuple(workload))


def arms_as_factor(arms: tuple[Arm, ...], baseline: str) -> Levels:
    """A flat [[arms]] list swept across scenarios: the arms are the levels of factor 'arm'."""
    ordered = [a for a in arms if a.name == baseline] + [a for a in arms if a.name != baseline]
    return Levels(Factor("arm", tuple(a.name for a in ordered)),
                  [{"__arm__": a} for a in ordered])
