"""Request-level interleaving of servers (design "interleaved" with `window_ops`): every arm's
server up at once, one client (hugelab-reqmix, C) holding `clients` connections to each and
alternating windows of `window_ops` operations between them in a random order and its mirror
(ABBA), so arms are compared within milliseconds of each other and the drift of a shared vCPU
cancels. The trial stays the unit: fresh servers per trial; the windows sharpen each trial's
paired estimate, and are kept for the report.

A server kind offers, beside `stop(srv)`:
    launched(backing) -> srv           its server up for this arm, not yet filled
    fill(srv)                          what it loads into a fresh server (PostgreSQL's
                                       prewarm, Redis's RDB): every arm's at once (start_all)
    request_server(srv) -> str         the client's --server value for this running server
    request_load() -> dict             its load as ReqmixSettings fields (script, keys, ...)
    request_result(srv, metrics, backing) -> WorkloadResult
                                       the arm's result: these metrics, the server's own
                                       evidence (read now, the server still up) and its info
    server_pid(srv) -> int             the server's main process, for pinning and CPU time

Pinning: the servers share one set of CPUs, the client runs on another (the last CPU), so
every arm's server runs on the same CPUs; the provenance records it. The servers' CPU time per
operation (their whole process trees) and khugepaged's and kcompactd's CPU time over the trial
are measured beside the client's windows: the client's round trip dilutes an effect on the
server, and huge pages' background work is in no server's tree."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.proc import quiet
from hugelab.stats.windows import (
    block_arm_means,
    block_log_ratios,
    hl_shift,
    median_se,
    robust_arm_rates,
)
from hugelab.workloads.base import Place, Target, WorkloadResult, place_of
from hugelab.workloads.reqmix import ReqmixResult, ReqmixSettings, parse_output, reqmix_argv
from hugelab.workloads.reqmix import effects as window_effects
from hugelab.workloads.reqmix_build import ensure_reqmix
from hugelab.workloads.servercpu import (
    core_map,
    daemons_cpu_s,
    pin_tree,
    pinning,
    tree_cpu_s,
)
from hugelab.workloads.toolrun import check_exit

DEFAULT_WINDOW_OPS = 200  # a fallback: request-level trials run only with window_ops set
SETTLED_MIN_BLOCKS = 6  # blocks after the first second for a trial's settled effect


class Startable(Protocol):
    """A server kind as start_all starts it: launched, then filled with its data."""

    def launched(self, backing: str) -> Any: ...
    def fill(self, srv: Any) -> None: ...
    def stop(self, srv: Any) -> None: ...


class RequestServer(Startable, Protocol):
    clients: int
    duration_s: float
    window_ops: int | None
    warm_ops: int

    def request_server(self, srv: Any) -> str: ...
    def request_load(self) -> dict[str, Any]: ...
    def request_result(self, srv: Any, metrics: dict[str, float], backing: str
                       ) -> WorkloadResult: ...
    def server_pid(self, srv: Any) -> int: ...


def wants_requests(workload: object) -> bool:
    """Whether a server workload asks for request-level windows (it sets window_ops)."""
    return bool(getattr(workload, "window_ops", None)) and \
        callable(getattr(workload, "request_server", None))


def arm_metrics(result: ReqmixResult, arm: int, reference: int = 0) -> dict[str, float]:
    """One arm's trial metrics from the client's windows (pure): `ops_per_s` the arm's rate
    robust to preempted windows (stats.windows.robust_arm_rates: its log-ratio to the
    reference arm's is the Hodges-Lehmann shift of their paired per-block log-ratios),
    `ops_per_s_mean` the plain geometric mean of its windows' rates (whose log-ratio is their
    mean), `window_blocks` the client's blocks that timed every arm (the same for every arm:
    fewer than a within-trial interval needs and the trial is flagged, hugelab.trial.judge
    measurement_check), latency percentiles in ms, the client's CPU share, and (other arms) the
    within-trial window effect against the reference (the mean) with its 95% interval, and
    the Hodges-Lehmann and median log-ratios with their standard errors (robust_effects)."""
    mine = [w for w in result.windows if w.arm == arm and w.ns > 0 and w.ops > 0]
    if not mine:
        raise WorkloadError(f"hugelab-reqmix timed no window of arm {arm}")
    mean = math.exp(float(np.mean([math.log(w.ops * 1e9 / w.ns) for w in mine])))
    timed = [w for w in result.windows if w.ns > 0 and w.ops > 0]
    rate = robust_arm_rates([w.arm for w in timed], [w.block for w in timed],
                            [w.ops for w in timed], [w.ns for w in timed], reference)[arm]
    lat = next(x for x in result.latency if x.arm == arm)
    complete = block_arm_means([w.arm for w in timed], [w.block for w in timed],
                               [w.ops for w in timed], [w.ns for w in timed])[1].shape[0]
    out = {"ops_per_s": rate, "ops_per_s_mean": mean, "ops": float(lat.ops_total),
           "windows": float(len(mine)), "window_blocks": float(complete),
           "latency_avg_ms": lat.mean_ns / 1e6, "p50_ms": lat.p50_ns / 1e6,
           "p99_ms": lat.p99_ns / 1e6, "p99_9_ms": lat.p999_ns / 1e6,
           "client_cpu_share": result.client_cpu_share(arm)}
    if arm != reference:
        e = window_effects(result, reference)[arm]
        mid, lo, hi = e.percent
        out.update({"window_effect_pct": mid, "window_effect_lo_pct": lo,
                    "window_effect_hi_pct": hi, "block_sd_pct": 100.0 * e.block_sd,
                    "window_log_ratio": e.log_ratio, "window_se_log": e.se,
                    **robust_effects(block_log_ratios(*result.columns(), arm, reference)),
                    **settled_effect(result, arm, reference)})
    return out


def settled_effect(result: ReqmixResult, arm: int, reference: int) -> dict[str, float]:
    """The Hodges-Lehmann shift of the paired per-block log-ratios over the blocks after the
    trial's first second (`settled_hl_log_ratio`, with `settled_blocks`), where that leaves
    SETTLED_MIN_BLOCKS or more (pure): the trial's effect without its new connections' start."""
    d = block_log_ratios(*result.settled(), arm, reference)
    if d.size < SETTLED_MIN_BLOCKS:
        return {}
    return {"settled_hl_log_ratio": hl_shift(d), "settled_blocks": float(d.size)}


def robust_effects(d: np.ndarray) -> dict[str, float]:
    """The paired per-block log-ratios' Hodges-Lehmann shift (the recorded rates' log-ratio)
    and median, each with its standard error within the trial (from the 95% signed-rank and
    sign-test intervals, over 2 x 1.96), for the trial's analysis (pure)."""
    from hugelab.stats.signedrank import hl_and_interval  # scipy: not on every import

    if d.size < 2:
        return {}
    _, lo, hi, _ = hl_and_interval(d[None, :], 0.05)
    return {"window_hl_log_ratio": hl_shift(d),
            "window_hl_se_log": float(hi[0] - lo[0]) / (2 * 1.959964),
            "window_median_log_ratio": float(np.median(d)), "window_median_se_log": median_se(d)}


def settings_for(arms: Sequence[tuple[RequestServer, str]], servers: list[str],
                 seed: int) -> ReqmixSettings:
    first = arms[0][0]
    return ReqmixSettings(servers=tuple(servers), clients=first.clients,
                          window_ops=first.window_ops or DEFAULT_WINDOW_OPS,
                          warm_ops=first.warm_ops, duration_s=first.duration_s, seed=seed,
                          **first.request_load())


def serve_requests(target: Target, arms: Sequence[tuple[RequestServer, str]],
                   rng: random.Random | None = None, reference: int = 0
                   ) -> list[WorkloadResult]:
    """One request-interleaved trial: one result per (workload, backing), in the given order
    (the order the servers start in), window effects against arm `reference`."""
    rng = rng or random.Random()
    if place_of(target) is not Place.NATIVE:
        raise WorkloadError("request-level interleaving runs its servers on the host")
    servers: list[Any] = []
    try:
        start_all(arms, servers)
        return _measure(target, arms, servers, rng, reference)
    finally:
        stop_all([(wl, srv) for (wl, _b), srv in zip(arms, servers, strict=False)])


def start_all(arms: Sequence[tuple[Startable, str]], servers: list[Any]) -> None:
    """Every arm's server launched into `servers` in the block's order, then all filled at
    once, each in its own thread; the first failure re-raised after every fill ended (the
    caller stops what is in `servers`). Filled one after another, the server filled last
    served 0.6-1.5% more per start slot in PostgreSQL's A/A runs, and prewarmed in reverse,
    the slope reversed (docs/benchmarks.md): the order in which a server's memory is first
    touched, not its start, favoured it. Filled at once, their pages interleave."""
    for wl, backing in arms:
        servers.append(wl.launched(backing))
    _each_at_once([(wl.fill, srv) for (wl, _b), srv in zip(arms, servers, strict=True)])


def start_one(wl: Any, backing: str) -> Any:
    """One server launched and filled, stopped again if its fill fails: a kind's `start`,
    where its server runs alone or among windows of client runs (interleave.serve)."""
    srv = wl.launched(backing)
    try:
        wl.fill(srv)
    except BaseException:
        wl.stop(srv)
        raise
    return srv


def _each_at_once(calls: Sequence[tuple[Callable[[Any], None], Any]]) -> None:
    """Every fn(arg) at once, each in its own thread; the first failure re-raised after all
    have ended."""
    if not calls:
        return
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(fn, arg) for fn, arg in calls]
    errors = [e for f in futures if (e := f.exception()) is not None]
    if errors:
        raise errors[0]


def slots(index: int, connect_order: Sequence[int]) -> dict[str, int]:
    """Where arm `index` stood in its trial: its server's start slot (the block's order) and,
    where the client reports it, the slot it was connected and preloaded in, so start order
    and load order can be told apart in the analysis (issue 39's twins' lean)."""
    out = {"start_slot": index}
    if index in connect_order:
        out["connect_slot"] = list(connect_order).index(index)
    return out


def stop_all(running: Sequence[tuple[Any, Any]]) -> None:
    """Stop every (workload, server) at once, each in its own thread, and re-raise the first
    failure after all have ended: a server's own shutdown may take its time (memcached's
    SIGTERM: 0.42 s, measured), and one after another that was 1.3 s of every three-server
    trial."""
    _each_at_once([(wl.stop, srv) for wl, srv in running])


def _measure(target: Target, arms: Sequence[tuple[RequestServer, str]], servers: list[Any],
             rng: random.Random, reference: int) -> list[WorkloadResult]:
    cpus = sorted(os.sched_getaffinity(0))
    pins = pinning(cpus, len(arms), core_map(cpus))
    own = pins.get("each") or [pins["servers"]] * len(arms)
    pids = [wl.server_pid(srv) for (wl, _b), srv in zip(arms, servers, strict=True)]
    for pid, its in zip(pids, own, strict=True):
        pin_tree(pid, its)
    settings = settings_for(arms, [wl.request_server(srv) for (wl, _b), srv in
                                   zip(arms, servers, strict=True)], rng.randrange(1 << 31))
    argv = ["taskset", "-c", ",".join(map(str, pins["client"])),
            *reqmix_argv(ensure_reqmix(), settings)]
    cpu0, daemons0 = [tree_cpu_s(p) for p in pids], daemons_cpu_s()
    with quiet():  # the windows' timing is the measurement: no tree sampling beside it
        res = target.exec(argv, timeout=(settings.duration_s or 60.0) + 120.0)
    cpu1, daemons1 = [tree_cpu_s(p) for p in pids], daemons_cpu_s()
    check_exit(res, "hugelab-reqmix")
    report = parse_output(res.stdout)
    daemons = {k: round(daemons1.get(k, 0.0) - v, 3) for k, v in daemons0.items()}
    out = []
    for i, ((wl, backing), srv) in enumerate(zip(arms, servers, strict=True)):
        metrics = arm_metrics(report, i, reference)
        ops = next(x.ops_total for x in report.latency if x.arm == i)
        metrics["server_cpu_us_per_op"] = 1e6 * (cpu1[i] - cpu0[i]) / ops if ops else math.nan
        r = wl.request_result(srv, metrics, backing)
        r.info["interleaved"] = {"design": "requests", "servers": len(arms), "index": i,
                                 "window_ops": settings.window_ops, "clients": settings.clients,
                                 "blocks": report.blocks, "pinning": pins, "cpus": own[i],
                                 "seed": settings.seed,
                                 **slots(i, report.connect_order)}
        r.info["thp_daemons_cpu_s"] = daemons
        out.append(r)
    return out
