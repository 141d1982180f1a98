"""Experiment files (TOML) -> validated, frozen Experiment. Pure: errors name the line."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from hugelab import kernel
from hugelab.errors import ExperimentError, did_you_mean
from hugelab.experiment.backings import PMD_LABEL, backing_error, label_kb, mthp_size_problem
from hugelab.experiment.factors import (
    Levels,
    arms_as_factor,
    expand,
    parse_factors,
    parse_scenarios,
)
from hugelab.experiment.model import (
    ACCESS_MODES,
    DEFAULT_KIND,
    MANAGERS,
    Arm,
    Experiment,
    Factor,
    GuestLayer,
    PoolSpec,
    VmLayer,
)
from hugelab.experiment.where import Locator as _Locator

THP_MODES = kernel.THP_ENABLED
THP_DEFRAG = kernel.THP_DEFRAG
DESIGNS = ("paired", "duet", "interleaved")
TOP_KEYS = {"name", "seed", "blocks", "design", "baseline", "workload", "arms", "evidence",
            "description", "vm", "factors", "scenarios", "base", "cells", "repeats", "costs"}
ARM_KEYS = {"name", "backing", "thp", "thp_defrag", "pools", "description", "vm", "guest",
            "app", "process_thp", "thp_max_ptes_none", "thp_shrink_underused", "memory_limit",
            "host_state", "fragment"}
HOST_STATES = ("fresh", "fragmented")
FRAGMENT_DEFAULT = 0.9  # the share of free memory made unusable for 2 MiB pages
MEMORY_LIMIT_MIN = 16 * 1024 * 1024  # below this, no program's own code and libraries fit
LIMIT_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}
PROCESS_THP = ("never", "madvise")
APP_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
VM_BACKINGS = ("anon", "file", "memfd")
VM_KEYS = {"backing", "page_size", "prealloc", "share", "mem", "vcpus", "vms", "numa_node",
           "cpu_pin", "kernel", "accel", "domain", "uri", "access", "ssh_user", "ssh_key",
           "manager", "trials_per_boot", "mthp"}
DOMAIN_ONLY_KEYS = ("access", "ssh_user", "ssh_key")
GUEST_KEYS = {"thp", "pools", "mthp"}
MTHP_MODES = kernel.MTHP_ENABLED
VM_DEFAULT_KEYS = {"kernel", "accel", "mem", "vcpus", "domain", "uri", "access", "ssh_user",
                   "ssh_key", "manager", "trials_per_boot"}
EVIDENCE_KEYS = {"thp_min_fraction"}
COSTS_KEYS = {"memory_margin"}


# --- parsing and validation ---------------------------------------------------------------

def _err(loc: _Locator | None, msg: str, key: str, *, arm: int | None = None,
         table: str | None = None, hint: str | None = None) -> ExperimentError:
    line = loc.line_of(key, arm, table) if loc else None
    where = f"line {line}: " if line else ""
    return ExperimentError(f"{where}{msg}", hint=hint)


def parse_pools(value: Any, loc: _Locator | None, idx: int,
                table: str | None = None) -> tuple[PoolSpec, ...]:
    """pools = { "2M" = 600, "1G" = 2 }  or  pools = ["2M=600", "1G=2@0"] (page count @ node)."""
    items: list[tuple[str, Any]]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = [tuple(str(v).split("=", 1)) if "=" in str(v) else (str(v), None) for v in value]  # type: ignore[misc]
    else:
        raise _err(loc, "pools must be a table like { \"2M\" = 512 }", "pools", arm=idx, table=table)
    out = []
    for size, count in items:
        m = re.fullmatch(r"(\d+)(?:@(\d+))?", str(count))
        if size not in ("2M", "1G") or not m:
            raise _err(loc, f"bad pool '{size}={count}'", "pools", arm=idx, table=table,
                       hint="sizes are 2M or 1G; counts are page numbers, optionally @NODE")
        out.append(PoolSpec(size, int(m.group(1)), int(m.group(2)) if m.group(2) else None))
    return tuple(out)


def _check_keys(d: dict[str, Any], allowed: set[str], loc: _Locator | None, what: str,
                arm: int | None = None, table: str | None = None) -> None:
    for key in d:
        if key not in allowed:
            guess = f"{close} " if (close := did_you_mean(key, allowed)) else ""
            raise _err(loc, f"unknown key '{key}' in {what}", key, arm=arm, table=table,
                       hint=f"{guess}known keys: {', '.join(sorted(allowed))}")


def _choice(value: Any, allowed: tuple[str, ...], key: str, loc: _Locator | None,
            arm: int | None = None, what: str = "", table: str | None = None) -> str:
    if value not in allowed:
        raise _err(loc, f"{what}{key} = {value!r} is not one of: {', '.join(allowed)}", key,
                   arm=arm, table=table)
    return str(value)


def _backing(value: Any, loc: _Locator | None, idx: int, what: str) -> str:
    """An arm's backing: a name of the vocabulary (hugelab.experiment.backings); whether this
    host offers an mthp-<size> is the run's check."""
    problem = backing_error(value) if isinstance(value, str) else \
        f"backing = {value!r} is not a backing name"
    if problem:
        raise _err(loc, f"{what}{problem}", "backing", arm=idx)
    return str(value)


def _mthp_size(value: Any, loc: _Locator | None, idx: int, what: str, table: str,
               pmd: bool = False) -> str:
    """A multi-size THP size label (16K, 64K, 1M; 2M too where `pmd`); whether a kernel
    offers it is the host's (vm mthp: the run's check) or the guest's (guest mthp) to say."""
    if isinstance(value, str) and (label_kb(value) is not None and (pmd or value != PMD_LABEL)):
        return value
    why = mthp_size_problem(value) if isinstance(value, str) else "not a size"
    raise _err(loc, f"{what}mthp = {value!r}: {why}", "mthp", arm=idx, table=table)


def parse_arm(d: Any, idx: int, loc: _Locator | None,
              defaults: dict[str, Any] | None = None, *, cell: bool = False) -> Arm:
    """One [[arms]] table, or (cell=True) one cell of a factorial, as a validated Arm."""
    defaults = defaults or {}
    if not isinstance(d, dict):
        raise _err(loc, "each [[arms]] entry must be a table", "arms")
    named = f" '{d['name']}'" if isinstance(d.get("name"), str) else ""
    _check_keys(d, ARM_KEYS, loc, f"arm #{idx + 1}{named}", arm=idx)
    name = d.get("name")
    if not cell and (not isinstance(name, str)
                     or not re.fullmatch(r"[A-Za-z0-9_.+\-]{1,64}", name)):
        raise _err(loc, f"arm #{idx + 1} needs a name of letters, digits, '_.+-' (got {name!r})",
                   "name", arm=idx)
    what = f"{'cell' if cell else 'arm'} '{name}': "
    backing = _backing(d.get("backing"), loc, idx, what)
    thp = _choice(d["thp"], THP_MODES, "thp", loc, idx, what) if "thp" in d else None
    defrag = (_choice(d["thp_defrag"], THP_DEFRAG, "thp_defrag", loc, idx, what)
              if "thp_defrag" in d else None)
    pools = parse_pools(d["pools"], loc, idx) if "pools" in d else ()
    vm = parse_vm(d["vm"], defaults, loc, idx, what) if "vm" in d else None
    guest = parse_guest(d["guest"], loc, idx, what) if "guest" in d else None
    if guest is not None and vm is None:
        raise _err(loc, f"{what}a [arms.guest] layer needs an [arms.vm] layer", "guest", arm=idx)
    app = parse_app(d["app"], loc, idx, what) if "app" in d else ()
    process_thp = (_choice(d["process_thp"], PROCESS_THP, "process_thp", loc, idx, what)
                   if "process_thp" in d else None)
    max_ptes_none, shrink, limit = _tunables(d, loc, idx, what, vm is not None)
    state, fragment = _host_state(d, loc, idx, what)
    return Arm(str(name), backing, thp, defrag, pools, str(d.get("description", "")), vm, guest,
               app=app, process_thp=process_thp, thp_max_ptes_none=max_ptes_none,
               thp_shrink_underused=shrink, memory_limit=limit, host_state=state,
               fragment=fragment)


def _host_state(d: dict[str, Any], loc: _Locator | None, idx: int, what: str
                ) -> tuple[str | None, float | None]:
    """host_state = "fresh" | "fragmented", and for a fragmented host `fragment` (the share of
    free memory made unusable for 2 MiB pages, 0.9 unless given)."""
    state = (_choice(d["host_state"], HOST_STATES, "host_state", loc, idx, what)
             if "host_state" in d else None)
    frag = d.get("fragment")
    if frag is not None and state != "fragmented":
        raise _err(loc, f"{what}fragment = {frag!r} goes with host_state = \"fragmented\"",
                   "fragment", arm=idx, hint="add host_state = \"fragmented\" to the arm")
    if frag is not None and (isinstance(frag, bool) or not isinstance(frag, int | float)
                             or not 0.0 < frag < 1.0):
        raise _err(loc, f"{what}fragment = {frag!r} must be a share between 0 and 1 (the free "
                   "memory made unusable for 2 MiB pages)", "fragment", arm=idx,
                   hint="e.g. fragment = 0.9")
    if state == "fragmented":
        return state, float(FRAGMENT_DEFAULT if frag is None else frag)
    return state, None


def _tunables(d: dict[str, Any], loc: _Locator | None, idx: int, what: str,
              guest: bool) -> tuple[int | None, bool | None, int | None]:
    """thp_max_ptes_none (an integer >= 0; the kernel's top, 511 on x86-64, is the run's
    check), thp_shrink_underused (true/false) and memory_limit (a size like "1G"; "none": no
    limit; native arms only)."""
    ptes = d.get("thp_max_ptes_none")
    if ptes is not None and (not isinstance(ptes, int) or isinstance(ptes, bool) or ptes < 0):
        raise _err(loc, f"{what}thp_max_ptes_none = {ptes!r} must be an integer from 0 to 511 "
                   "(the empty or zero-filled 4 KiB pages a 2 MiB THP may have)",
                   "thp_max_ptes_none", arm=idx, hint="e.g. 409 (80%), Meta's shrinker setting")
    shrink = d.get("thp_shrink_underused")
    if shrink is not None and not isinstance(shrink, bool):
        raise _err(loc, f"{what}thp_shrink_underused = {shrink!r} must be true or false",
                   "thp_shrink_underused", arm=idx)
    limit = _memory_limit(d["memory_limit"], loc, idx, what) if "memory_limit" in d else None
    if limit is not None and guest:
        raise _err(loc, f"{what}memory_limit goes with native arms: a guest's memory is QEMU's "
                   "and the guest kernel's to manage", "memory_limit", arm=idx,
                   hint="size the guest with vm mem, or run the arm natively")
    return ptes, shrink, limit


def _memory_limit(value: Any, loc: _Locator | None, idx: int, what: str) -> int | None:
    """memory_limit = "1G" (K, M, G or T; KiB..TiB) -> bytes; "none" -> None."""
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    m = re.fullmatch(r"(\d+)\s*([KMGT])(?:i?B)?", value.strip(), re.IGNORECASE) \
        if isinstance(value, str) else None
    if m is None:
        raise _err(loc, f"{what}memory_limit = {value!r}: write a size like \"512M\" or "
                   "\"2G\" (or \"none\")", "memory_limit", arm=idx)
    limit = int(m.group(1)) * LIMIT_UNITS[m.group(2).upper()]
    if limit < MEMORY_LIMIT_MIN:
        raise _err(loc, f"{what}memory_limit = {value!r} is below 16M: the workload's own "
                   "program would not fit", "memory_limit", arm=idx)
    return limit


def parse_app(d: Any, loc: _Locator | None, idx: int, what: str) -> tuple[tuple[str, Any], ...]:
    """app = { huge_pages = "on", shared_buffers = "256MB" }: the application's own switches
    and settings for this arm, as sorted (key, value) pairs of scalars or lists of scalars.
    Which keys a kind takes, the workload checks (PostgreSQL asks the server itself)."""
    if not isinstance(d, dict):
        raise _err(loc, f"{what}app must be a table of the application's settings, e.g. "
                   "app = { huge_pages = \"on\" }", "app", arm=idx)
    out = []
    for key, value in d.items():
        if not APP_KEY.fullmatch(key):
            raise _err(loc, f"{what}app key {key!r} is not a setting name", "app", arm=idx)
        scalars = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str | int | float | bool) for v in scalars):
            raise _err(loc, f"{what}app {key} must be a string, number, true/false or a list "
                       f"of them (got {value!r})", "app", arm=idx)
        out.append((key, tuple(value) if isinstance(value, list) else value))
    return tuple(sorted(out))


def parse_mib(value: Any, key: str, loc: _Locator | None, idx: int | None,
              table: str | None = None) -> int:
    m = re.fullmatch(r"(\d+)\s*([MG])i?B?", str(value).strip(), re.IGNORECASE)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not m:
        raise _err(loc, f"{key} = {value!r}: write a size like \"512M\" or \"2G\"", key, arm=idx,
                   table=table)
    return int(m.group(1)) * (1024 if m.group(2).upper() == "G" else 1)


def parse_vm(d: Any, defaults: dict[str, Any], loc: _Locator | None, idx: int,
             what: str) -> VmLayer:
    if not isinstance(d, dict):
        raise _err(loc, f"{what}vm must be a table", "vm", arm=idx, table="vm")
    _check_keys(d, VM_KEYS, loc, f"{what}[arms.vm]", arm=idx, table="vm")
    d = {**defaults, **d}
    backing = _choice(d.get("backing", "anon"), VM_BACKINGS, "backing", loc, idx, f"{what}vm ", "vm")
    page = d.get("page_size")
    if page is not None and page not in ("2M", "1G"):
        raise _err(loc, f"{what}vm page_size = {page!r} is not 2M or 1G", "page_size", arm=idx, table="vm")
    if backing == "file" and page is None:
        raise _err(loc, f"{what}vm backing 'file' (hugetlbfs) needs page_size", "backing",
                   arm=idx, table="vm", hint="page_size = \"2M\" or \"1G\"")
    if backing == "anon" and page is not None:
        raise _err(loc, f"{what}vm backing 'anon' takes no page_size (THP follows the host mode)",
                   "page_size", arm=idx, table="vm", hint="use backing = \"file\" or \"memfd\" for hugetlb")
    mthp = _vm_mthp(d, backing, page, loc, idx, what)
    ints = {k: d[k] for k in ("vcpus", "vms", "numa_node", "trials_per_boot") if k in d}
    for k, v in ints.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "numa_node" else 1):
            raise _err(loc, f"{what}vm {k} must be a positive integer (got {v!r})", k, arm=idx, table="vm")
    pin = d.get("cpu_pin")
    if pin is not None and not (isinstance(pin, list) and all(isinstance(c, int) for c in pin)):
        raise _err(loc, f"{what}vm cpu_pin must be a list of host CPU numbers", "cpu_pin", arm=idx, table="vm")
    domain = d.get("domain")
    if domain is not None and (not isinstance(domain, str) or not domain.strip()):
        raise _err(loc, f"{what}vm domain must name a libvirt domain", "domain", arm=idx,
                   table="vm")
    if domain is not None and d.get("kernel"):
        raise _err(loc, f"{what}vm kernel goes with hugelab's own guests, not a domain "
                   "(it boots as it is defined)", "kernel", arm=idx, table="vm")
    uri = d.get("uri", "qemu:///system")
    if not isinstance(uri, str) or not re.fullmatch(r"[a-z+]+://[^\s]*", uri):
        raise _err(loc, f"{what}vm uri = {uri!r} is not a libvirt URI", "uri", arm=idx,
                   table="vm", hint="e.g. qemu:///system")
    own = 0 if domain is not None else None  # 0: the domain's own, read when the run starts
    access = _access(d, domain, loc, idx, what)
    manager = _choice(d.get("manager", "qemu"), MANAGERS, "manager", loc, idx, f"{what}vm ", "vm")
    if domain is not None and "manager" in d:
        raise _err(loc, f"{what}vm manager goes with hugelab's own guests (a domain is always "
                   "libvirt's)", "manager", arm=idx, table="vm")
    return VmLayer(backing, page, bool(d.get("prealloc", False)), bool(d.get("share", False)),
                   parse_mib(d["mem"], "mem", loc, idx, "vm") if "mem" in d else (512 if own is None else own),
                   ints.get("vcpus", own if own is not None else 1),
                   ints.get("vms", 1), ints.get("numa_node"), tuple(pin) if pin else None,
                   d.get("kernel"), _choice(d.get("accel", "auto"), ("auto", "kvm", "tcg"),
                                            "accel", loc, idx, f"{what}vm ", "vm"),
                   domain, uri, *access, manager, ints.get("trials_per_boot", 1), mthp)


def _vm_mthp(d: dict[str, Any], backing: str, page: Any, loc: _Locator | None, idx: int,
             what: str) -> str | None:
    """vm mthp: a host multi-size THP size for guest RAM (anon, or memfd without page_size)."""
    if "mthp" not in d:
        return None
    size = _mthp_size(d["mthp"], loc, idx, f"{what}vm ", "vm")
    if backing not in ("anon", "memfd") or page is not None:
        raise _err(loc, f"{what}vm mthp goes with guest RAM the host's THP can back: backing "
                   "\"anon\", or \"memfd\" without page_size", "mthp", arm=idx, table="vm",
                   hint="leave out page_size (hugetlb pages are not THP)")
    if backing == "memfd" and not d.get("share", False):
        raise _err(loc, f"{what}vm mthp with memfd guest RAM needs share = true: a private "
                   "mapping of a memfd gives every page the guest writes a 4 KiB anonymous "
                   "copy, never a shmem folio", "mthp", arm=idx, table="vm",
                   hint="add share = true, or use backing = \"anon\"")
    return size


def _access(d: dict[str, Any], domain: str | None, loc: _Locator | None, idx: int,
            what: str) -> tuple[str, str, str | None]:
    """(access, ssh_user, ssh_key) of a domain's arm; hugelab's own guests take none."""
    given = [k for k in DOMAIN_ONLY_KEYS if k in d]
    if domain is None:
        if given:
            raise _err(loc, f"{what}vm {given[0]} goes with a user's domain (vm domain = ...); "
                       "hugelab reaches its own guests through its own agent", given[0],
                       arm=idx, table="vm")
        return "auto", "root", None
    access = _choice(d.get("access", "auto"), ACCESS_MODES, "access", loc, idx, f"{what}vm ",
                     "vm")
    user = d.get("ssh_user", "root")
    if not isinstance(user, str) or not re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", user):
        raise _err(loc, f"{what}vm ssh_user = {user!r} is not a user name", "ssh_user",
                   arm=idx, table="vm")
    key = d.get("ssh_key")
    if key is not None and (not isinstance(key, str) or not key.startswith("/")):
        raise _err(loc, f"{what}vm ssh_key = {key!r} must be the absolute path of a private key",
                   "ssh_key", arm=idx, table="vm",
                   hint="leave it out to use ssh's own defaults (~/.ssh, ssh-agent)")
    if access == "agent" and ("ssh_user" in d or key is not None):
        raise _err(loc, f"{what}vm ssh_user/ssh_key go with access = \"ssh\" or \"auto\"",
                   "access", arm=idx, table="vm")
    return access, user, key


def parse_guest(d: Any, loc: _Locator | None, idx: int, what: str) -> GuestLayer:
    if not isinstance(d, dict):
        raise _err(loc, f"{what}guest must be a table", "guest", arm=idx)
    _check_keys(d, GUEST_KEYS, loc, f"{what}[arms.guest]", arm=idx, table="guest")
    thp = (_choice(d["thp"], THP_MODES, "thp", loc, idx, f"{what}guest ", "guest")
           if "thp" in d else None)
    pools = {p.size: p.pages for p in parse_pools(d["pools"], loc, idx, "guest")} if "pools" in d else {}
    return GuestLayer(thp, pools.get("2M"), pools.get("1G"), _guest_mthp(d, loc, idx, what))


def _guest_mthp(d: dict[str, Any], loc: _Locator | None, idx: int,
                what: str) -> tuple[tuple[str, str], ...]:
    """guest mthp = { "64K" = "always" }: the guest's hugepages-<N>kB/enabled, by size."""
    value = d.get("mthp", {})
    if not isinstance(value, dict):
        raise _err(loc, f"{what}guest mthp must be a table of size = mode, e.g. "
                   "{ \"64K\" = \"always\" }", "mthp", arm=idx, table="guest")
    out = []
    for size, mode in value.items():
        _mthp_size(size, loc, idx, f"{what}guest ", "guest", pmd=True)
        out.append((size, _choice(mode, MTHP_MODES, "mthp", loc, idx, f"{what}guest {size} ",
                                  "guest")))
    return tuple(sorted(out, key=lambda sm: _label_kb(sm[0])))


def _label_kb(label: str) -> int:
    return int(label[:-1]) * (1024 if label.endswith("M") else 1)


def _int(d: dict[str, Any], key: str, default: int, lo: int, loc: _Locator | None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise _err(loc, f"{key} must be an integer >= {lo} (got {v!r})", key)
    return v


def host_settings(arm: Arm) -> tuple[object, ...]:
    """The host-wide settings an arm's trials run under, which arms that run at the same time
    (duet, interleaved) must share."""
    return (arm.thp, arm.thp_defrag, arm.thp_max_ptes_none, arm.thp_shrink_underused,
            arm.memory_limit, arm.host_state, arm.fragment)


def _knobs(arm: Arm) -> tuple[object, ...]:
    """The per-size THP and shmem knobs an arm's trials set (see runner.arm_thp_knobs)."""
    native = arm.vm is None
    return (arm.mthp_kb if native else None, native and arm.backing == "shmem-thp",
            arm.vm.mthp if arm.vm else None, arm.vm.backing if arm.vm and arm.vm.mthp else None)


def _check_interleaved(arms: tuple[Arm, ...], factorial: bool, loc: _Locator | None) -> None:
    """design 'interleaved', what holds for every kind: every arm runs at once on this host
    under one set of host THP modes. What a kind needs beyond that (which kinds interleave at
    all, and how) its own declaration says: hugelab.workloads.registry.check_design."""
    why = hint = None
    if factorial:
        why = "it does not mix with [factors] or [scenarios]"
    elif any(a.vm is not None for a in arms):
        why = "its arms run side by side on the host: no guest arms"
        hint = "use design = \"paired\" (or trials_per_boot) for guests"
    elif len({host_settings(a) for a in arms}) > 1:
        why = ("every arm runs under one host setting, so the arms must share thp, "
               "thp_defrag, thp_max_ptes_none, thp_shrink_underused, memory_limit and "
               "host_state; arms "
               "that differ in them cannot be interleaved")
        hint = "use design = \"paired\" to compare host THP modes"
    if why:
        raise _err(loc, f"design 'interleaved': {why}", "design",
                   hint=hint or "use design = \"paired\"")


def _check_vm_used(vm_defaults: dict[str, Any], arms: tuple[Arm, ...], loc: _Locator | None) -> None:
    """[vm] defaults that no arm uses would run every arm natively, without a word."""
    if vm_defaults and not any(a.vm is not None for a in arms):
        raise _err(loc, "[vm] sets guest defaults, but no arm runs in a guest: every arm would "
                   "run natively on this host", next(iter(vm_defaults)), table="vm",
                   hint="give each arm that runs in the guest an [arms.vm] table (vm = {} "
                   "takes the [vm] defaults as they are), or remove [vm]")


def parse_experiment(d: dict[str, Any], text: str | None = None, name: str = "experiment") -> Experiment:
    loc = _Locator(text) if text is not None else None
    _check_keys(d, TOP_KEYS, loc, "the experiment")
    vm_defaults = d.get("vm", {})
    if not isinstance(vm_defaults, dict):
        raise _err(loc, "[vm] must be a table of guest defaults", "vm")
    _check_keys(vm_defaults, VM_DEFAULT_KEYS, loc, "[vm]", table="vm")
    design = _choice(d.get("design", "paired"), DESIGNS, "design", loc)
    if "factors" in d:
        arms, factors, baseline = _factorial(d, vm_defaults)
    else:
        arms, baseline = _flat_arms(d, loc, vm_defaults)
        factors = ()
        for key in ("base", "cells"):
            if key in d:
                raise _err(loc, f"{key} goes with [factors]", key,
                           hint="declare [factors], or put the settings in each [[arms]]")
        if "scenarios" in d:
            arms, factors, baseline = expand([arms_as_factor(arms, baseline),
                                              *parse_scenarios(d["scenarios"])],
                                             {}, None, None, None)
    if design == "duet" and factors:
        raise _err(loc, "design 'duet' runs every arm of a block at once: it does not mix with "
                   "[factors] or [scenarios] (a block of cells would be many guests at once)",
                   "design", hint="use design = \"paired\" for a factorial")
    if design == "duet" and len({host_settings(a) for a in arms}) > 1:
        raise _err(loc, "design 'duet' runs all arms at the same time, so they must share the "
                   "host THP modes and tunables (thp, thp_defrag, thp_max_ptes_none, "
                   "thp_shrink_underused) and memory_limit (one cgroup holds both)", "design",
                   hint="use design = \"paired\" to compare host THP modes")
    if design == "duet" and len({_knobs(a) for a in arms}) > 1:
        raise _err(loc, "design 'duet' runs all arms at the same time under one set of host "
                   "knobs, and mthp-<size> / shmem-thp backings and vm mthp set knobs of their "
                   "own (per-size THP, shmem_enabled): the arms must agree on them", "design",
                   hint="use design = \"paired\" to compare page sizes that set host knobs")
    _check_vm_used(vm_defaults, arms, loc)
    workload = d.get("workload", {"kind": DEFAULT_KIND})
    if design == "interleaved":
        _check_interleaved(arms, bool(factors), loc)
    if not isinstance(workload, dict) or "kind" not in workload:
        raise _err(loc, "[workload] needs a kind", "workload",
                   hint="docs/experiments.md lists the kinds under 'Workload kinds'")
    evidence = d.get("evidence", {})
    _check_keys(evidence, EVIDENCE_KEYS, loc, "[evidence]", table="evidence")
    return Experiment(
        name=str(d.get("name", name)),
        description=str(d.get("description", "")),
        arms=arms,
        workload=dict(workload),
        seed=_int(d, "seed", 1, 0, loc),
        blocks=_int(d, "blocks", 10, 1, loc),
        repeats=_int(d, "repeats", 1, 1, loc),
        design=design,
        baseline=baseline,
        thp_min_fraction=float(evidence.get("thp_min_fraction", 0.5)),
        factors=factors,
        memory_margin=_memory_margin(d.get("costs", {}), loc),
    )


def _memory_margin(costs: Any, loc: _Locator | None) -> float | None:
    """`[costs] memory_margin = 0.02` (a share of the baseline's memory footprint)."""
    if not isinstance(costs, dict):
        raise _err(loc, "[costs] must be a table", "costs", hint="[costs]\nmemory_margin = 0.05")
    _check_keys(costs, COSTS_KEYS, loc, "[costs]", table="costs")
    if "memory_margin" not in costs:
        return None
    value = costs["memory_margin"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 10:
        raise _err(loc, f"[costs] memory_margin = {value!r} is not a share between 0 and 10",
                   "memory_margin", table="costs", hint="e.g. memory_margin = 0.05 for 5% of the baseline's "
                   "memory footprint")
    return float(value)


def _flat_arms(d: dict[str, Any], loc: _Locator | None,
               vm_defaults: dict[str, Any]) -> tuple[tuple[Arm, ...], str]:
    arms_raw = d.get("arms")
    if not isinstance(arms_raw, list) or not arms_raw:
        raise ExperimentError("the experiment has no arms",
                              hint="add at least two [[arms]] tables, each with name and "
                              "backing, or a [factors] table (see the README)")
    arms = tuple(parse_arm(a, i, loc, vm_defaults) for i, a in enumerate(arms_raw))
    names = [a.name for a in arms]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise _err(loc, f"arm names must be unique: {', '.join(sorted(dup))}", "name")
    baseline = d.get("baseline", names[0])
    if baseline not in names:
        raise _err(loc, f"baseline '{baseline}' is not an arm", "baseline",
                   hint=f"arms: {', '.join(names)}")
    return arms, str(baseline)


def _factorial(d: dict[str, Any], vm_defaults: dict[str, Any]
               ) -> tuple[tuple[Arm, ...], tuple[Factor, ...], str]:
    """[factors] (+ [scenarios], [base], cells, baseline = {factor = level}) -> cells as arms."""
    if "arms" in d:
        raise ExperimentError("give either [[arms]] or [factors], not both",
                              hint="[factors] makes the arms: one per combination of levels")
    if "baseline" in d and not isinstance(d["baseline"], dict):
        raise ExperimentError("with [factors], baseline is a table of levels, e.g. "
                              "baseline = { thp = \"never\" } (default: each factor's first level)")
    base = d.get("base", {})
    if not isinstance(base, dict):
        raise ExperimentError("[base] must be a table of arm settings every cell starts from")
    _check_keys(base, ARM_KEYS - {"name", "description"}, None, "[base]")
    levels: list[Levels] = parse_factors(d["factors"])
    if "scenarios" in d:
        levels += parse_scenarios(d["scenarios"])

    def make_arm(name: str, settings: dict[str, Any]) -> Arm:
        return parse_arm({"backing": "4k", **settings, "name": name}, 0, None, vm_defaults,
                         cell=True)

    cells = d.get("cells")
    if cells is not None and not isinstance(cells, list):
        raise ExperimentError("cells must be a list of tables, e.g. cells = [{ thp = \"never\" }]")
    return expand(levels, base, cells, d.get("baseline"), make_arm)


def beside(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The [workload] table's strings written `./x` or `../x` as paths beside the experiment
    file in `folder` (an example and its data files run from any directory) (pure)."""
    table = data.get("workload")
    if not isinstance(table, dict):
        return data
    local = {k: str(Path(os.path.normpath(folder / v))) for k, v in table.items()
             if isinstance(v, str) and v.startswith(("./", "../"))}
    return {**data, "workload": {**table, **local}} if local else data


def load_experiment(path: Path) -> Experiment:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ExperimentError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = beside(tomllib.loads(text), path.parent.absolute())
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return parse_experiment(data, text, name=path.stem)
    except ExperimentError as exc:
        raise ExperimentError(f"{path}: {exc.message}", hint=exc.hint) from exc
