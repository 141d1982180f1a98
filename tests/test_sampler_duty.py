"""The tree sampler's own CPU is capped (procscan.ALLOWANCE_S, then MAX_DUTY of a CPU): a
sample that walks a large 4 KiB page table costs more than one over huge pages
(bench/keeper_cost.py), so at a fixed interval the sampler would take more CPU beside one arm
than beside the other. Past its allowance a sample waits until the sampler's CPU is back under
the share; within it, or when samples are cheap, the interval holds."""

from __future__ import annotations

import threading
import time

import pytest

from hugelab.trial import procscan


class FakeCost(procscan.TreeSampler):
    """A sampler whose every sample 'costs' `cost_s` of this thread's CPU (a fake clock)."""

    def __init__(self, cost_s: float, clock: list[float], interval_s: float) -> None:
        super().__init__(lambda: [], interval_s)
        self.cost_s, self.clock, self.taken = cost_s, clock, 0

    def _sample(self) -> None:
        self.taken += 1
        self.clock[0] += self.cost_s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake CPU clock for the sampler's own thread; every other thread reads the real one."""
    now = [0.0]
    real = time.thread_time

    def thread_time() -> float:
        return now[0] if threading.current_thread().name == "hugelab-tree-sampler" else real()
    monkeypatch.setattr(procscan.time, "thread_time", thread_time)
    return now


def run_for(sampler: FakeCost, seconds: float) -> dict[str, object]:
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def test_past_the_allowance_the_next_sample_waits_for_the_share(clock: list[float]) -> None:
    # one sample spends the allowance and MAX_DUTY x 1 s more: the next waits about 1 s,
    # where the 0.02 s interval would have taken ~25
    s = FakeCost(procscan.ALLOWANCE_S + procscan.MAX_DUTY, clock, interval_s=0.02)
    out = run_for(s, 0.5)
    assert s.taken == 1
    assert out["sample_cpu_s"] == pytest.approx(procscan.ALLOWANCE_S + procscan.MAX_DUTY)


def test_within_the_allowance_a_short_trial_is_sampled_as_before(clock: list[float]) -> None:
    s = FakeCost(procscan.ALLOWANCE_S / 100, clock, interval_s=0.02)
    run_for(s, 0.5)
    assert s.taken >= 10


def test_the_cap_bounds_the_cpu_whatever_a_sample_costs(clock: list[float]) -> None:
    cost = procscan.ALLOWANCE_S / 5  # five samples spend the allowance, then 0.2 s apart
    s = FakeCost(cost, clock, interval_s=0.01)
    out = run_for(s, 0.8)
    seconds = float(str(out["seconds"]))
    spent = float(str(out["sample_cpu_s"]))
    assert spent <= procscan.ALLOWANCE_S + procscan.MAX_DUTY * seconds + cost
    assert 6 <= s.taken <= 10  # 0.01 s apart it would be ~80


def test_under_cap() -> None:
    assert procscan.under_cap(0.0, 0.0) == 0.0
    assert procscan.under_cap(procscan.ALLOWANCE_S, 5.0) == 0.0
    assert procscan.under_cap(procscan.ALLOWANCE_S + procscan.MAX_DUTY * 3, 1.0) == \
        pytest.approx(2.0)


def test_the_keeper_caps_its_reads_alike() -> None:
    from hugelab.workloads import serverkeep
    assert (serverkeep.MAX_DUTY, serverkeep.ALLOWANCE_S) == \
        (procscan.MAX_DUTY, procscan.ALLOWANCE_S)  # kept in its own layer: the same numbers
