"""Interleaved servers (design "interleaved" for a server workload): every arm's server up at
once, each with its own settings, pool share and evidence; one client alternates short load
windows between them, in a random order and its mirror (ABBA...), so drift of the machine
cancels within the trial as it does in hugelab-mem's interleaved buffers.

A server workload offers `launched(backing) -> server` and `fill(server)` (its data loaded:
every arm's server is launched in the block's order, then all are filled at once, as
request-level trials do: hugelab.workloads.requests.start_all), `warm(target, server)`,
`window(target, server, seconds) -> (summary metrics, per-request latencies in µs)`,
`window_s`, `duration_s`, `finish(server, windows, latencies, backing) -> WorkloadResult`,
and `stop(server)`. Each arm's result: its primary metric the geometric mean of its windows
(so the log-ratio of two arms is the mean of their windows' log-ratios), latency percentiles
over all its windows' requests, every window kept as a repetition within the trial."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.base import Target, WorkloadResult
from hugelab.workloads.requests import (
    Startable,
    serve_requests,
    start_all,
    stop_all,
    wants_requests,
)


class ServerWorkload(Startable, Protocol):
    window_s: float
    duration_s: float

    def warm(self, target: Target, server: Any) -> None: ...
    def window(self, target: Target, server: Any, seconds: float
               ) -> tuple[dict[str, float], np.ndarray]: ...
    def finish(self, server: Any, windows: list[dict[str, float]], latencies: np.ndarray,
               backing: str) -> WorkloadResult: ...


def is_server(workload: object) -> bool:
    """Whether a workload runs as interleaved servers: windows of client runs (launched,
    window, finish) or of requests (launched, request_server: hugelab.workloads.requests)."""
    def has(*names: str) -> bool:
        return all(callable(getattr(workload, n, None)) for n in names)
    return has("launched", "window", "finish") or has("launched", "request_server")


def order(n_arms: int, rounds: int, rng: random.Random) -> list[list[int]]:
    """Each round's arm order: a random permutation, then its mirror, and so on (pure). The
    permutations come n at a time, the n rotations of a random order in a random sequence, so
    every arm leads a round (and closes its mirror) exactly once per n pairs of rounds rather
    than as often as chance gives (issue 39); hugelab-reqmix lays out its blocks the same way."""
    out: list[list[int]] = []
    cycle: list[list[int]] = []
    while len(out) < rounds:
        if not cycle:
            first = list(range(n_arms))
            rng.shuffle(first)
            cycle = [first[k:] + first[:k] for k in range(n_arms)]
            rng.shuffle(cycle)
        perm = cycle.pop()
        out += [perm, perm[::-1]]
    return out[:rounds]


def rounds_for(duration_s: float, window_s: float) -> int:
    """Windows per arm: duration_s of load each, in windows of window_s, an even count (every
    order appears with its mirror), at least 2."""
    n = max(2, int(duration_s // window_s))
    return n + (n % 2)


def geomean(values: Sequence[float]) -> float:
    if not values or any(v <= 0 for v in values):
        raise WorkloadError(f"a window without a positive value: {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def serve(target: Target, arms: Sequence[tuple[ServerWorkload, str]],
          rng: random.Random | None = None, reference: int = 0) -> list[WorkloadResult]:
    """One interleaved trial: one result per (workload, backing), in the given order; with
    `window_ops` set, windows of requests from one client (hugelab.workloads.requests)."""
    rng = rng or random.Random()
    if wants_requests(arms[0][0]):
        return serve_requests(target, arms, rng, reference)  # type: ignore[arg-type]
    servers: list[Any] = []
    try:
        start_all(arms, servers)
        for (wl, _b), srv in zip(arms, servers, strict=True):
            wl.warm(target, srv)
        window_s = arms[0][0].window_s
        plan = order(len(arms), rounds_for(arms[0][0].duration_s, window_s), rng)
        windows: list[list[dict[str, float]]] = [[] for _ in arms]
        lats: list[list[np.ndarray]] = [[] for _ in arms]
        for perm in plan:
            for i in perm:
                wl, _b = arms[i]
                summary, lat = wl.window(target, servers[i], window_s)
                windows[i].append(summary)
                lats[i].append(lat)
        out = []
        for i, ((wl, backing), srv) in enumerate(zip(arms, servers, strict=True)):
            res = wl.finish(srv, windows[i], np.concatenate(lats[i]), backing)
            res.info["interleaved"] = {"servers": len(arms), "index": i, "window_s": window_s,
                                       "order": plan}
            out.append(res)
        return out
    finally:
        stop_all([(wl, srv) for (wl, _b), srv in zip(arms, servers, strict=False)])


Problem = Callable[[tuple[Any, ...], dict[str, Any]], "tuple[str, str] | None"]


def requests_only(kind: str, client: str) -> Problem:
    """A kind's `interleave` when it interleaves windows of requests only: its own load
    generator (`client`) has no timed runs to alternate, so the workload sets window_ops."""
    def problem(arms: tuple[Any, ...], table: dict[str, Any]) -> tuple[str, str] | None:
        if not table.get("window_ops"):
            return (f"{kind} interleaves windows of requests, not whole {client} runs",
                    "set window_ops (e.g. 200) in [workload]")
        return server_problem(arms, table)
    return problem


def server_problem(arms: tuple[Any, ...], table: dict[str, Any]) -> tuple[str, str] | None:
    """(why, hint) when a server kind's arms cannot all be up at once as interleaved servers:
    the workload names a port (each server takes a free loopback port of its own), or the load
    does not hold a window per arm and its mirror. A kind's `interleave` for servers."""
    if table.get("port") is not None:
        return ("every arm's server listens on a port of its own, so the workload cannot name "
                "one", "leave port unset: hugelab picks a free loopback port per server")
    duration, window = table.get("duration_s", 10.0), table.get("window_s", 2.0)
    if table.get("window_ops"):
        return None  # windows of requests: milliseconds each, any duration holds many
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (duration, window)) \
            and duration < 2 * window:
        return (f"duration_s {duration:g} is shorter than two windows of window_s {window:g} "
                "(a window per arm and its mirror)",
                "raise duration_s, or lower window_s (whole seconds, at least 1)")
    return None
