"""Request-level trials launch every arm's server in the block's order, then fill them all at
once (issue 39): filled one after another, the server PostgreSQL prewarmed last served 0.6-1.5%
more per start slot, and prewarmed in reverse the slope reversed (docs/benchmarks.md)."""

from __future__ import annotations

import threading

import pytest

from hugelab.workloads.requests import start_all


class Fake:
    def __init__(self, name: str, log: list[str], barrier: threading.Barrier,
                 fails: bool = False) -> None:
        self.name, self.log, self.barrier, self.fails = name, log, barrier, fails

    def launched(self, backing: str) -> str:
        self.log.append(f"launch {self.name} {backing}")
        return f"srv-{self.name}"

    def fill(self, srv: str) -> None:
        # every fill waits here for the others: one after another, the first would time out
        self.barrier.wait(timeout=10)
        self.log.append(f"filled {srv}")
        if self.fails:
            raise RuntimeError(f"{srv}: prewarm failed")


def test_every_server_is_launched_in_order_then_all_are_filled_at_once():
    log: list[str] = []
    barrier = threading.Barrier(3)
    arms = [(Fake(n, log, barrier), b) for n, b in (("b", "4k"), ("a", "4k"), ("c", "2M"))]
    servers: list[str] = []
    start_all(arms, servers)  # type: ignore[arg-type]
    assert servers == ["srv-b", "srv-a", "srv-c"]
    assert log[:3] == ["launch b 4k", "launch a 4k", "launch c 2M"]
    assert sorted(log[3:]) == ["filled srv-a", "filled srv-b", "filled srv-c"]


def test_a_failed_fill_is_raised_after_every_fill_ended_with_every_server_kept_to_stop():
    log: list[str] = []
    barrier = threading.Barrier(2)
    arms = [(Fake("a", log, barrier, fails=True), "4k"), (Fake("b", log, barrier), "4k")]
    servers: list[str] = []
    with pytest.raises(RuntimeError, match="srv-a: prewarm failed"):
        start_all(arms, servers)  # type: ignore[arg-type]
    assert servers == ["srv-a", "srv-b"]  # the caller stops both
    assert "filled srv-b" in log
