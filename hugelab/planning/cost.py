"""What an experiment will cost before it runs: trials, seconds per trial, and which factor to
cut when it does not fit a budget. Pure: measured figures are passed in, and each kind's run
time key comes from its declaration (hugelab.workloads.kind)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from hugelab.errors import ExperimentError
from hugelab.experiment.model import Arm, Experiment
from hugelab.workloads.kind import Kind
from hugelab.workloads.preview import BYTES_PER_UNIT, GuestBuild
from hugelab.workloads.registry import kinds

OVERHEAD_S = 0.5  # per trial: starting processes, evidence, committing
ASSUMED_BOOT_S = {"kvm": 2.0, "tcg": 8.0}  # hugelab's own guests: 6-10 s under TCG
# A user's domain boots a whole distribution: 15-20 s under TCG for the demo domain (Debian 12,
# 512 MiB) in the runs of redis-, memcached-, mariadb- and postgres-domain.
ASSUMED_DOMAIN_BOOT_S = {"kvm": 5.0, "tcg": 16.0}


# Making an aged host (hugelab.host.fragment): the holder faults in about `fragment` of the
# free memory, then chooses, pins and frees. Measured: 17.1 GiB in 60 s on the 2-core Intel VM
# (aged-host, 2026-11-30: every first touch there is also a fault in its hypervisor), ~20 GiB in
# 20-30 s on the AMD one; the slower rate, so that a budget holds.
FRAGMENT_BYTES_PER_S = 0.3 * 2**30
FRAGMENT_FIXED_S = 3.0  # compaction first, the pages' frame numbers, pinning, settling


@dataclass(frozen=True)
class Measured:
    """Figures from earlier runs in the store: median guest boot seconds, per-arm trial
    seconds, and the rate at which this host's fragment holders faulted memory in (bytes/s);
    and the host's free memory now (KiB, /proc/buddyinfo), which an aged host's making fills."""

    boot_s: float | None = None
    trial_s: dict[str, float] | None = None
    fragment_rate: float | None = None
    free_kb: int = 0


@dataclass(frozen=True)
class Estimate:
    seconds: float
    per_block_s: float
    trials: int
    basis: dict[str, str]  # arm -> "measured" | "configured" | "unknown"
    per_arm: dict[str, float | None]  # seconds per trial of each arm
    boot_s: float
    boot_basis: str
    fragment_s: float = 0.0  # per block: making the aged host's states (host_state)
    layers_s: float = 0.0  # once: the domains' layers (at most: a cached one is not built)


def _duration(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)?", str(value).strip())
    if not m:
        return None
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2) or "s"]


def _declared(table: dict[str, Any]) -> tuple[Kind | None, dict[str, Any]]:
    """The table's kind and the table in its dataclass's keys (an alias like `duration`)."""
    declared = kinds().get(str(table.get("kind")))
    if declared is not None and declared.file_keys is not None:
        try:
            table = declared.file_keys({k: v for k, v in table.items() if k != "kind"})
        except ExperimentError:
            pass  # the build says what is wrong; the estimate reads what it can
    return declared, table


def workload_seconds(table: dict[str, Any], design: str = "paired") -> float | None:
    """The run time a [workload] table configures (the key its kind declares), or None when
    it does not say."""
    declared, table = _declared(table)
    key, default = (declared.duration if declared and declared.duration else (None, None))
    if design == "interleaved" and declared is not None and declared.role == "server":
        key, default = "duration_s", 10.0  # windows of load, or of requests, per trial
    if key and key in table:
        return _duration(table[key])
    if declared is not None and declared.seconds is not None and default is None:
        return declared.seconds(table)
    return default


def fill_seconds(table: dict[str, Any], design: str = "paired",
                 app: tuple[tuple[str, Any], ...] = ()) -> float:
    """Seconds one interleaved server spends readying its data before its load (its kind's
    `fill_seconds`: a preload, a snapshot's load, a cluster's copy and prewarm, with the arm's
    `app`); 0 in other designs, where the kind's own `seconds` already counts it, and for
    kinds that fill nothing."""
    declared, table = _declared(table)
    if design != "interleaved" or declared is None or declared.role != "server" or \
            declared.fill_seconds is None:
        return 0.0
    return declared.fill_seconds(table, dict(app))


def _together(exp: Experiment) -> bool:
    """A block's arms run at once (a duet, one process holding every arm's buffer, or one
    client's windows of requests over every server); interleaved servers alternating whole
    client runs take turns, each its own windows."""
    if exp.design == "duet":
        return True
    if exp.design != "interleaved":
        return False
    declared = kinds().get(str(exp.workload.get("kind")))
    return declared is None or declared.role != "server" or \
        bool(exp.workload.get("window_ops"))


def _in_domain(arm: Arm) -> bool:
    return arm.vm is not None and arm.vm.domain is not None


def trial_seconds(exp: Experiment, arm: Arm, boot_s: float, measured: dict[str, float],
                  accel: str = "tcg") -> tuple[float | None, str, float]:
    """One trial's seconds of `arm`, where they come from ("measured", "configured" or
    "unknown"), and the part of them its server spends filling its data (0 when measured:
    a measured trial's fill is in it and cannot be told apart)."""
    if arm.name in measured:
        return measured[arm.name], "measured", 0.0
    table = exp.workload_for(arm)
    run = workload_seconds(table, exp.design)
    if run is None:
        return None, "unknown", 0.0
    guest = in_guest_build_s(table, accel) if _in_domain(arm) else 0.0
    fill = fill_seconds(table, exp.design, arm.app)  # once: it may read a data tree's size
    return (run + fill + OVERHEAD_S + guest + (boot_s if arm.vm is not None else 0.0),
            "configured", fill)


def _boot(exp: Experiment, measured: Measured, accel: str) -> tuple[float, float, str]:
    """(own guests' boot s, domains' boot s, what the dry run says of it)."""
    if measured.boot_s is not None:
        return measured.boot_s, measured.boot_s, "measured"
    own, dom = ASSUMED_BOOT_S.get(accel, 8.0), ASSUMED_DOMAIN_BOOT_S.get(accel, 16.0)
    vms = [a for a in exp.arms if a.vm is not None]
    if vms and all(_in_domain(a) for a in vms):
        return own, dom, f"assumed ({accel}, a user's domain)"
    return own, dom, f"assumed ({accel})"


def fragment_seconds(exp: Experiment, free_kb: int, rate: float | None = None) -> float:
    """Seconds a block spends making the fragmented states its arms ask for (`host_state =
    "fragmented"`): one holder per degree, each faulting in about that share of `free_kb`
    (hugelab.host.hoststate keeps a holder across units of one degree, so this is at most)."""
    degrees = {a.fragment for a in exp.arms if a.host_state == "fragmented" and a.fragment}
    per_s = rate or FRAGMENT_BYTES_PER_S
    return sum(FRAGMENT_FIXED_S + d * free_kb * 1024 / per_s for d in degrees)


def estimate(exp: Experiment, measured: Measured = Measured(), accel: str = "tcg") -> Estimate:
    """Seconds for the whole experiment: blocks (x repeats) x the sum of every arm's trial time (a duet or
    interleaved block runs its arms at once: its longest, but its servers' fills share the CPUs:
    all of them), plus each block's making of the aged host's states over the measured free
    memory. Unknown workload times count as zero and say so."""
    if all(a.vm.accel == "kvm" for a in exp.arms if a.vm is not None) and \
            any(a.vm is not None for a in exp.arms):
        accel = "kvm"  # the file asks for KVM (a run fails rather than fall back to TCG)
    own, dom, basis_boot = _boot(exp, measured, accel)
    boot = dom if basis_boot.endswith("domain)") else own
    times = {a.name: trial_seconds(exp, a, dom if _in_domain(a) else own,
                                   measured.trial_s or {}, accel) for a in exp.arms}
    secs = [t or 0.0 for t, _, _ in times.values()]
    fills = [fill for _, _, fill in times.values()]
    frag = fragment_seconds(exp, measured.free_kb, measured.fragment_rate)
    per_block = frag + (max((s - f for s, f in zip(secs, fills, strict=True)), default=0.0)
                        + sum(fills) if _together(exp) else sum(secs))
    blocks = exp.blocks * exp.repeats  # every repeat runs every block (pauses not counted)
    once = layers_s(exp, dom, accel)
    return Estimate(per_block * blocks + once, per_block, blocks * len(exp.arms),
                    {k: b for k, (_, b, _) in times.items()},
                    {k: s for k, (s, _, _) in times.items()},
                    boot, basis_boot, frag, once)


def cuts(exp: Experiment, measured: Measured = Measured(), accel: str = "tcg"
         ) -> list[tuple[str, float]]:
    """Per factor with more than one level: the experiment's seconds if that factor kept only
    its first level (a scenario factor: its first value). Cheapest first. An arm factor is a
    candidate only while another arm factor still has two levels: a cut must leave something
    to compare."""
    out = []
    compared = [f for f in exp.factors if not f.scenario and len(f.levels) > 1]
    for f in exp.factors:
        if len(f.levels) < 2 or (not f.scenario and len(compared) < 2):
            continue
        keep = tuple(a for a in exp.arms if dict(a.levels).get(f.name) == f.levels[0])
        out.append((f.name, estimate(replace(exp, arms=keep), measured, accel).seconds))
    return sorted(out, key=lambda x: x[1])


def human(seconds: float) -> str:
    """3 min 20 s, 2 h 05 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60:02d} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60:02d} min" if s % 3600 // 60 else "")


# What a run builds before its first trial (hugelab.workloads.preview.Build), per recipe:
# bytes per unit of its amount, and seconds = fixed + bytes / rate. pgbench: about 16 MB a
# scale step (100,000 accounts and their index; PostgreSQL's docs: scale 1 is about 15 MB).
# A restore writes its data and builds its indexes: a plain or tar dump grows about 1.5x, a
# custom one (compressed) about 4x; PostgreSQL loads about 30 MB/s with fsync off, then ANALYZE.
BUILD_FIXED_S = 3.0          # initdb, a server started and stopped, the copy into the cache
BUILD_BYTES_PER_S = 30e6


def build_cost(recipe: str, amount: float) -> tuple[int | None, float | None]:
    """(bytes, seconds) a build of `recipe` over `amount` takes; (None, None) for a recipe
    the model does not know."""
    per = BYTES_PER_UNIT.get(recipe)
    if per is None:
        return None, None
    size = amount * per
    return int(size), BUILD_FIXED_S + size / BUILD_BYTES_PER_S


# What a trial in a user's domain builds in the guest (a kind's `guest_build`) is sized here:
# its data loaded at the build's rate and, where it reads it again (a prewarm), at the page
# cache's, under TCG about 5x slower than on the host's CPU (the demo domain's PostgreSQL, scale
# 1: about 17 s of build a trial in all, workloads/postgres/guestcost.py).
GUEST_SLOWDOWN = {"kvm": 1.0, "tcg": 5.0}
REREAD_BYTES_PER_S = 200e6


def in_guest_build(table: dict[str, Any]) -> GuestBuild | None:
    """What a trial of `table` in a user's domain builds in the guest (None: nothing)."""
    declared, table = _declared(table)
    return declared.guest_build(table) if declared and declared.guest_build else None


def in_guest_build_s(table: dict[str, Any], accel: str = "tcg") -> float:
    """Seconds a trial of `table` in a user's domain spends building in the guest before its
    load; 0 for a kind whose trial builds nothing there."""
    g = in_guest_build(table)
    if g is None:
        return 0.0
    size = build_cost(g.recipe, g.amount)[0] or 0
    slow = GUEST_SLOWDOWN.get(accel, GUEST_SLOWDOWN["tcg"])
    reread = size / REREAD_BYTES_PER_S if g.reread else 0.0
    fixed = g.fixed_s.get(accel, max(g.fixed_s.values(), default=0.0))
    load = 0.0 if g.layer_s else size / BUILD_BYTES_PER_S  # a layer's: once, layer_build_s
    return fixed + slow * (load + reread) + g.warmup_s


def layer_build_s(table: dict[str, Any], accel: str = "tcg", boot_s: float = 0.0) -> float:
    """Seconds a run spends once building the data of `table` in a user's domain's layer (a
    boot, the kind's fixed part, its data): 0 for a kind without one. An upper bound: a layer
    already cached is not built again."""
    g = in_guest_build(table)
    if g is None or not g.layer_s:
        return 0.0
    size = build_cost(g.recipe, g.amount)[0] or 0
    slow = GUEST_SLOWDOWN.get(accel, GUEST_SLOWDOWN["tcg"])
    return boot_s + g.layer_s.get(accel, max(g.layer_s.values())) + \
        slow * size / BUILD_BYTES_PER_S


def layers_s(exp: Experiment, boot_s: float, accel: str) -> float:
    """Seconds of every layer the experiment's domain arms build, once each (by domain and
    build)."""
    once: dict[tuple[str, str], float] = {}
    for a in exp.arms:
        if a.vm is not None and a.vm.domain is not None:
            table = exp.workload_for(a)
            g = in_guest_build(table)
            if g is not None and g.layer_s:
                once[(a.vm.domain, g.layer_what)] = layer_build_s(table, accel, boot_s)
    return sum(once.values())
