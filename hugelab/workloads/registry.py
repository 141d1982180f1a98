"""Experiment-file workload tables -> workload objects, with clear errors.

    [workload]
    kind = "sysbench"
    block_size = "256M"
    access_mode = "rnd"

`build_workload("sysbench", {"block_size": "256M", "access_mode": "rnd"})` returns a
`SysbenchMemory`. Keys are the dataclass fields of each workload (see KINDS); values are checked
against the field types, so a typo or a wrong type fails before any trial runs, e.g.
"workload 'sysbench': unknown key 'blok_size'; known keys: access_mode, binary, ...".
Each kind declares itself in its own module (hugelab.workloads.kind); KINDS lists the modules.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from hugelab.errors import ExperimentError, did_you_mean
from hugelab.experiment import Arm, Experiment
from hugelab.proc import register_packages
from hugelab.workloads.base import Workload
from hugelab.workloads.kind import ARM_KEYS, INTERNAL, PLACES, Kind, check_app

# One line per kind: the module (or package) that declares it with a module-level `KIND`
# (hugelab.workloads.kind). Nothing else in hugelab names a kind.
KINDS: tuple[str, ...] = (
    "hugelab.workloads.hugelab_mem",
    "hugelab.workloads.sysbench",
    "hugelab.workloads.stressng",
    "hugelab.workloads.iperf3",
    "hugelab.workloads.redis",
    "hugelab.workloads.make_build",
    "hugelab.workloads.command",
    "hugelab.workloads.postgres.workload",
    "hugelab.workloads.jvm",
    "hugelab.workloads.memcached",
    "hugelab.workloads.mariadb.workload",
    "hugelab.workloads.varnish",
)

# never set by a [workload] table: hugelab's own fields, and what each arm sets (`app`)
NOT_FROM_FILES = INTERNAL | ARM_KEYS
ARM_FIELDS = ("app", "process_thp")  # what an arm hands its own workload object
_loaded: dict[str, Kind] = {}


def kinds() -> dict[str, Kind]:
    """Every registered kind's declaration, by name (each module imported once)."""
    if len(_loaded) < len(KINDS):
        for module in KINDS:
            try:
                declared = importlib.import_module(module).KIND
            except (ImportError, AttributeError) as exc:
                raise ExperimentError(f"workload module {module} is not available in this "
                                      f"hugelab: {exc}") from exc
            _loaded.setdefault(declared.name, declared)
        register_packages({t.name: t.package for k in _loaded.values() for t in k.tools})
    return _loaded


def lookup(name: str) -> Kind:
    """The declaration of kind `name`; ExperimentError (with a close match) when unknown."""
    known = kinds()
    if name not in known:
        raise ExperimentError(f"unknown workload kind '{name}'; known kinds: "
                              f"{', '.join(known_kinds())}", hint=did_you_mean(str(name), known),
                              key="kind")
    return known[name]


def kind_of(workload: object) -> Kind | None:
    """The declaration of a workload object's kind; None for an object of no registered kind."""
    return kinds().get(str(getattr(workload, "kind", "")))


class _Mismatch(Exception):
    pass


def known_kinds() -> list[str]:
    return sorted(kinds())


def _describe(hint: Any) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        plural = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}
        return f"a list of {plural.get(args[0], 'values')}" if args else "a list"
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _convert(value: Any, hint: Any) -> Any:
    """`value` as the field type `hint` wants it, or _Mismatch."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        for arg in args:
            try:
                return _convert(value, arg)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is Literal:
        if value in args and not isinstance(value, bool):
            return value
        raise _Mismatch
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _Mismatch
        return tuple(_convert(v, args[0]) for v in value) if args else tuple(value)
    return _convert_scalar(value, hint)


def _convert_scalar(value: Any, hint: Any) -> Any:
    if hint is type(None) and value is None:
        return None
    if hint is bool and isinstance(value, bool):
        return value
    if hint in (int, float, str) and not isinstance(value, bool):
        if isinstance(value, (float, int) if hint is float else hint):
            return hint(value)
    raise _Mismatch


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)
            if f.init and f.name not in NOT_FROM_FILES}


def named_key(message: str, keys: Any) -> str | None:
    """The first of `keys` that `message` names as a word (pure): which key of the file a
    kind's own error is about, so that its line can be shown; None when it names none."""
    found = [(m.start(), k) for k in keys
             if (m := re.search(rf"(?<![\w.]){re.escape(str(k))}(?![\w])", message))]
    return min(found)[1] if found else None


def build_workload(kind: str, params: dict[str, Any]) -> Workload:
    """The workload object for an experiment file's `[workload]` table (less its `kind`).
    Its errors carry the key they are about (ExperimentError.key), for the file's line."""
    declared = lookup(kind)
    cls = declared.workload
    given = [k for k in params if k != "kind"]  # the file's own keys, before any alias
    if declared.file_keys is not None:
        try:
            params = declared.file_keys(dict(params))
        except ExperimentError as exc:
            raise ExperimentError(f"workload '{kind}': {exc.message}", hint=exc.hint,
                                  key=exc.key or named_key(exc.message, given)) from None
    fields = _fields(cls)
    kwargs: dict[str, Any] = {}
    for key, value in params.items():
        if key not in fields:
            extra = "".join(f"{k}, " for k in declared.aliases)
            raise ExperimentError(
                f"workload '{kind}': unknown key '{key}'; known keys: {extra}"
                f"{', '.join(sorted(fields))}",
                hint=did_you_mean(key, fields), key=key)
        try:
            kwargs[key] = _convert(value, fields[key])
        except _Mismatch:
            raise ExperimentError(
                f"workload '{kind}': key '{key}' must be {_describe(fields[key])}, "
                f"got {type(value).__name__} {value!r}", key=key) from None
    try:
        if declared.app is not None:
            check_app(kind, tuple(kwargs.get("app", ())), declared.app)
        return cls(**kwargs)  # type: ignore[no-any-return]
    except ExperimentError as exc:
        msg = exc.message.removeprefix(f"{kind}: ")
        raise ExperimentError(f"workload '{kind}': {msg}", hint=exc.hint,
                              key=exc.key or named_key(msg, given)) from None
    except (TypeError, ValueError) as exc:
        raise ExperimentError(f"workload '{kind}': {exc}",
                              key=named_key(str(exc), given)) from exc


def with_arm(workload: Workload, arm: Arm) -> Workload:
    """`workload` as `arm` runs it: with the arm's application settings (`app`, held to the kind's
    declared `app` keys by check_app) and its processes' THP (`process_thp`), for kinds that
    take them (a field of the same name); the same object when the arm sets none."""
    given = {"app": arm.app, "process_thp": arm.process_thp}
    given = {k: v for k, v in given.items() if v}
    if not given:
        return workload
    kind = workload.kind
    if arm.process_thp and arm.vm is not None:
        raise ExperimentError(f"arm '{arm.name}': process_thp applies to the host's processes; "
                              "this arm runs its workload in guests",
                              hint="set the guests' THP with guest.thp", key="process_thp",
                              arm=arm.name)
    names = {f.name for f in dataclasses.fields(workload)}  # type: ignore[arg-type]
    missing = [k for k in given if k not in names]
    if missing:
        what = {"app": "application settings (app)",
                "process_thp": "per-process THP mode (process_thp)"}[missing[0]]
        raise ExperimentError(f"arm '{arm.name}': workload '{kind}' takes no {what}",
                              hint=_arm_field_hint(missing[0]), key=missing[0], arm=arm.name)
    try:
        if (keys := lookup(kind).app) is not None:
            check_app(kind, tuple(arm.app or ()), keys)
        return dataclasses.replace(workload, **given)  # type: ignore[type-var]
    except ExperimentError as exc:
        msg = exc.message.removeprefix(f"{kind}: ")
        raise ExperimentError(f"arm '{arm.name}': workload '{kind}': {msg}", hint=exc.hint,
                              key=named_key(msg, ("process_thp",)) or "app",
                              arm=arm.name) from None


def _arm_field_hint(field: str) -> str:
    """What to use instead, when an arm sets `app` or `process_thp` for a kind without it."""
    have = sorted(k.name for k in kinds().values()
                  if field in {f.name for f in dataclasses.fields(k.workload)})
    own = sorted(k.name for k in kinds().values() if k.asks_own_backing)
    if field == "app":
        return (f"app sets an application's own huge-page switches (kinds {', '.join(have)}); "
                "other workloads take their backing from the arm's backing and host knobs")
    return (f"process_thp wraps outside programs ({', '.join(have)}); {', '.join(own)} maps "
            "each buffer with the arm's backing itself")


def _place(arm: Arm) -> str:
    if arm.vm is None:
        return "host"
    return "domain" if arm.vm.domain is not None else "guest"


def check_places(exp: Experiment) -> None:
    """Refuse, before any trial, an arm or a design the experiment's kind cannot run, in the
    kind's own words: where it runs (its `where`), and design "interleaved" (its `interleave`)."""
    tables = {repr(sorted(exp.workload_for(a).items(), key=str)): exp.workload_for(a)
              for a in exp.arms}
    for table in tables.values():
        declared = lookup(str(table.get("kind")))
        for arm in exp.arms:
            if not declared.runs(place := _place(arm)):
                raise ExperimentError(f"arm '{arm.name}': {declared.refusal(place)}",
                                      hint=_where_hint(place), arm=arm.name,
                                      key=None if arm.vm is None else "vm")
        if table.get("client_apart") is True:
            _check_apart(exp)
        if exp.design != "interleaved":
            continue
        problem = None
        if not declared.runs("interleaved"):
            problem = (declared.refusal("interleaved"), _where_hint("interleaved"))
        elif declared.interleave is not None:
            problem = declared.interleave(exp.arms, table)
        if problem is not None:
            raise ExperimentError(f"design 'interleaved': {problem[0]}", hint=problem[1])


def _check_apart(exp: Experiment) -> None:
    """client_apart pins a server and its client to this host's CPUs, in paired trials: refused
    in a guest, with design "interleaved" (whose request-level windows always pin so) and on
    a host with one CPU for both."""
    import os

    if (guest := next((a for a in exp.arms if a.vm is not None), None)) is not None:
        raise ExperimentError(f"arm '{guest.name}': client_apart pins this host's CPUs; this "
                              "arm runs its workload in a guest", key="client_apart",
                              arm=guest.name, hint="leave client_apart unset for guest arms")
    if exp.design == "interleaved":
        raise ExperimentError('client_apart is for design "paired": design "interleaved" with '
                              "window_ops already runs its client on a CPU of its own",
                              key="client_apart", hint='set design = "paired", or leave '
                              "client_apart unset")
    if len(os.sched_getaffinity(0)) < 2:
        raise ExperimentError("client_apart needs two CPUs, one for the server and one for its "
                              "client: this process may use one", key="client_apart",
                              hint="run on a host (or a cpuset) with two CPUs or more")


def _where_hint(place: str) -> str:
    can = sorted(k.name for k in kinds().values() if k.runs(place))
    if place == "interleaved":
        return f"kinds that interleave: {', '.join(can)}; other workloads: design = \"paired\""
    return f"kinds that run {PLACES[place]}: {', '.join(can)}"


def build_for(exp: Experiment) -> tuple[Workload, dict[str, Workload]]:
    """The experiment's workload, and each arm's own where its scenario sets parameters or the
    arm sets application switches (`app`, `process_thp`): one object per distinct table, all
    built (so validated) before any trial runs."""
    def build(table: dict[str, Any]) -> Workload:
        return build_workload(table["kind"], {k: v for k, v in table.items() if k != "kind"})

    check_places(exp)
    per_arm: dict[str, Workload] = {}
    built: dict[tuple[tuple[str, Any], ...], Workload] = {}
    for arm in exp.arms:
        if not arm.workload:
            continue
        if arm.workload not in built:
            try:
                built[arm.workload] = build(exp.workload_for(arm))
            except ExperimentError as exc:
                where = ", ".join(f"{k} = {v!r}" for k, v in arm.workload)
                raise ExperimentError(f"scenario {where}: {exc.message}", hint=exc.hint,
                                      key=exc.key) from None
        per_arm[arm.name] = built[arm.workload]
    # with scenarios every cell has its own values: the default is the first cell's, so a
    # [workload] table that is only valid with them (stressor from [scenarios]) still builds
    first = exp.arms[0]
    default = per_arm[first.name] if first.name in per_arm else build(exp.workload)
    for arm in exp.arms:
        own = with_arm(per_arm.get(arm.name, default), arm)
        if callable(bind := getattr(own, "for_arm", None)):  # a kind whose settings follow
            own = bind(arm)                                   # the arm's backing (postgres)
        if own is not per_arm.get(arm.name, default):
            per_arm[arm.name] = own
    return default, per_arm
