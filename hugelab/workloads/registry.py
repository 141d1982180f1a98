"""Experiment-file workload tables -> workload objects, with clear errors.

    [workload]
    kind = "sysbench"
    block_size = "256M"
    access_mode = "rnd"

`build_workload("sysbench", {"block_size": "256M", "access_mode": "rnd"})` returns a
`SysbenchMemory`. Keys are the dataclass fields of each workload (see KINDS); values are checked
against the field types, so a typo or a wrong type fails before any trial runs, e.g.
"workload 'sysbench': unknown key 'blok_size'; known keys: access_mode, binary, ...".
Workload modules are imported lazily: `hugelab-mem` lives in hugelab.workloads.hugelab_mem.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from hugelab.errors import ExperimentError
from hugelab.experiment import Arm, Experiment
from hugelab.workloads.base import Workload

# kind -> (module, class)
KINDS: dict[str, tuple[str, str]] = {
    "sysbench": ("hugelab.workloads.sysbench", "SysbenchMemory"),
    "stress-ng": ("hugelab.workloads.stressng", "StressNg"),
    "iperf3": ("hugelab.workloads.iperf3", "IPerf3"),
    "redis": ("hugelab.workloads.redis", "RedisBenchmark"),
    "build": ("hugelab.workloads.make_build", "MakeBuild"),
    "command": ("hugelab.workloads.command", "CommandWorkload"),
    "hugelab-mem": ("hugelab.workloads.hugelab_mem", "HugelabMem"),
    "postgres": ("hugelab.workloads.postgres.workload", "Postgres"),
    "jvm": ("hugelab.workloads.jvm", "JvmBenchmark"),
    "memcached": ("hugelab.workloads.memcached", "MemcachedBenchmark"),
}
# set by code, never by a [workload] table: `app` and `process_thp` come from each arm
NOT_FROM_FILES = {"kind", "server", "app", "process_thp", "arm_backing"}
ARM_FIELDS = ("app", "process_thp")  # what an arm hands its own workload object


class _Mismatch(Exception):
    pass


def known_kinds() -> list[str]:
    return sorted(KINDS)


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


def _load(kind: str) -> type:
    module, name = KINDS[kind]
    try:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise ExperimentError(f"workload '{kind}' is not available in this hugelab: {exc}") from exc


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)
            if f.init and f.name not in NOT_FROM_FILES}


def _hugelab_mem_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """`size = "2G"` -> size_bytes, through hugelab_mem.parse_size; `duration` -> duration_s."""
    params = dict(params)
    if "duration" in params:
        if "duration_s" in params:
            raise ExperimentError(f"workload '{kind}': give duration or duration_s, not both")
        params["duration_s"] = params.pop("duration")
    if "size" in params:
        if "size_bytes" in params:
            raise ExperimentError(f"workload '{kind}': give size or size_bytes, not both")
        size = params.pop("size")
        if isinstance(size, str):
            from hugelab.workloads.hugelab_mem import parse_size
            try:
                size = parse_size(size)
            except ValueError as exc:
                raise ExperimentError(f"workload '{kind}': key 'size': {exc}") from exc
        elif isinstance(size, bool) or not isinstance(size, int):
            raise ExperimentError(f"workload '{kind}': key 'size' must be a size like \"2G\" "
                                  f"or a byte count, got {type(size).__name__} {size!r}")
        params["size_bytes"] = size
    return params


def build_workload(kind: str, params: dict[str, Any]) -> Workload:
    """The workload object for an experiment file's `[workload]` table (less its `kind`)."""
    if kind not in KINDS:
        close = difflib.get_close_matches(str(kind), KINDS, n=1)
        hint = f"did you mean '{close[0]}'?" if close else None
        raise ExperimentError(f"unknown workload kind '{kind}'; known kinds: "
                              f"{', '.join(known_kinds())}", hint=hint)
    cls = _load(kind)
    if kind == "hugelab-mem":
        params = _hugelab_mem_params(kind, params)
    fields = _fields(cls)
    kwargs: dict[str, Any] = {}
    for key, value in params.items():
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            extra = "duration, size, " if kind == "hugelab-mem" else ""
            raise ExperimentError(
                f"workload '{kind}': unknown key '{key}'; known keys: {extra}"
                f"{', '.join(sorted(fields))}",
                hint=f"did you mean '{close[0]}'?" if close else None)
        try:
            kwargs[key] = _convert(value, fields[key])
        except _Mismatch:
            raise ExperimentError(
                f"workload '{kind}': key '{key}' must be {_describe(fields[key])}, "
                f"got {type(value).__name__} {value!r}") from None
    try:
        return cls(**kwargs)  # type: ignore[no-any-return]
    except ExperimentError as exc:
        msg = exc.message
        for prefix in (f"{kind}: ", "hugelab-mem: "):
            msg = msg.removeprefix(prefix)
        raise ExperimentError(f"workload '{kind}': {msg}", hint=exc.hint) from None
    except (TypeError, ValueError) as exc:
        raise ExperimentError(f"workload '{kind}': {exc}") from exc


def with_arm(workload: Workload, arm: Arm) -> Workload:
    """`workload` as `arm` runs it: with the arm's application settings (`app`) and its
    processes' THP (`process_thp`), for kinds that take them (a field of the same name; the
    kind validates the values in its __post_init__); the same object when the arm sets none."""
    given = {"app": arm.app, "process_thp": arm.process_thp}
    given = {k: v for k, v in given.items() if v}
    if not given:
        return workload
    kind = workload.kind
    if arm.process_thp and arm.vm is not None:
        raise ExperimentError(f"arm '{arm.name}': process_thp applies to the host's processes; "
                              "this arm runs its workload in guests",
                              hint="set the guests' THP with guest.thp")
    names = {f.name for f in dataclasses.fields(workload)}  # type: ignore[arg-type]
    missing = [k for k in given if k not in names]
    if missing:
        what = {"app": "application settings (app)",
                "process_thp": "per-process THP mode (process_thp)"}[missing[0]]
        raise ExperimentError(f"arm '{arm.name}': workload '{kind}' takes no {what}",
                              hint=_ARM_FIELD_HINTS[missing[0]])
    try:
        return dataclasses.replace(workload, **given)  # type: ignore[type-var]
    except ExperimentError as exc:
        msg = exc.message.removeprefix(f"{kind}: ")
        raise ExperimentError(f"arm '{arm.name}': workload '{kind}': {msg}",
                              hint=exc.hint) from None


_ARM_FIELD_HINTS = {
    "app": "app sets an application's own huge-page switches (kinds postgres, jvm, memcached, "
           "redis); other workloads take their backing from the arm's backing and host knobs",
    "process_thp": "process_thp wraps outside programs (servers, commands); hugelab-mem maps "
                   "each buffer with the arm's backing itself",
}


def build_for(exp: Experiment) -> tuple[Workload, dict[str, Workload]]:
    """The experiment's workload, and each arm's own where its scenario sets parameters or the
    arm sets application switches (`app`, `process_thp`): one object per distinct table, all
    built (so validated) before any trial runs."""
    def build(table: dict[str, Any]) -> Workload:
        return build_workload(table["kind"], {k: v for k, v in table.items() if k != "kind"})

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
                raise ExperimentError(f"scenario {where}: {exc.message}", hint=exc.hint) from None
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
