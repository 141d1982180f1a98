"""Issue 39's twins' lean: nothing of an interleaved trial may follow an arm's place in the
experiment file. The servers start, warm up and are loaded in the block's order, which the
schedule draws afresh for every block from the run's seed; these guard that chain (they pass
on the commit that added them: no arm-position assignment was found, see docs/statistics.md)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hugelab.experiment import Arm, Experiment, schedule
from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.interleave import order, serve


@dataclass
class Fake:
    """A server kind that only records what happened to its servers, in order."""
    log: list[tuple[str, str]] = field(default_factory=list)
    window_s: float = 1.0
    duration_s: float = 4.0

    def launched(self, backing: str) -> str:
        self.log.append(("start", backing))
        return backing

    def fill(self, server: str) -> None:
        pass

    def warm(self, target: Any, server: str) -> None:
        self.log.append(("warm", server))

    def window(self, target: Any, server: str, seconds: float
               ) -> tuple[dict[str, float], np.ndarray]:
        self.log.append(("window", server))
        return {"ops_per_s": 1.0}, np.ones(1)

    def finish(self, server: str, windows: list[dict[str, float]], latencies: np.ndarray,
               backing: str) -> WorkloadResult:
        return WorkloadResult(metrics={"ops_per_s": 1.0}, primary="ops_per_s", unit="ops/s",
                              better="higher")

    def stop(self, server: str) -> None:
        self.log.append(("stop", server))


def test_each_arm_starts_first_as_often_as_the_others_and_the_order_is_the_seeds() -> None:
    arms = (Arm("off", "4k"), Arm("off-again", "4k"), Arm("on", "thp"))
    exp = Experiment("aa", arms, {"kind": "fake"}, seed=808, blocks=600, baseline="off",
                     design="interleaved")
    firsts = Counter(t.arm for t in schedule(exp) if t.position == 0)
    assert all(abs(n - 200) < 45 for n in firsts.values()) and len(firsts) == 3
    assert schedule(exp) == schedule(exp)  # reproducible from the seed


def test_servers_start_warm_and_load_in_the_blocks_order() -> None:
    fake = Fake()
    block = ["c", "a", "b"]  # the block's drawn order, not the file's
    serve(None, [(fake, b) for b in block], random.Random(1))  # type: ignore[arg-type]
    assert [s for what, s in fake.log if what == "start"] == block
    assert [s for what, s in fake.log if what == "warm"] == block
    windows = [s for what, s in fake.log if what == "window"]
    assert Counter(windows) == Counter({"a": 4, "b": 4, "c": 4})


def test_windows_come_in_a_random_order_and_its_mirror() -> None:
    rounds = order(3, 2000, random.Random(3))
    assert all(rounds[i][::-1] == rounds[i + 1] for i in range(0, len(rounds), 2))
    firsts = Counter(r[0] for r in rounds[::2])
    assert all(abs(n - 333) < 70 for n in firsts.values())
