"""The wall-clock budget of an `--until-verdict` run (`--budget 5m`): each block's time as it
ends, and how many more blocks fit before the budget is spent.

A block's time is the time between two block ends; the first block's also holds the run's
start (preflight, pools, the workloads' builds), so it counts only until a second block has
ended. The next block is predicted to take the median of the blocks so far; `RESERVE_S` is
kept for what follows the last block (the host's restore, the summary)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

RESERVE_S = 5.0  # after the last block: restoring the host, the summary
UNBOUNDED = 10**6  # blocks that take no time (a test's clock): the plan's own most bounds them


@dataclass
class BlockClock:
    budget_s: float
    now: Callable[[], float] = time.monotonic
    start: float = field(default=-1.0)
    ends: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.budget_s > 0:  # NaN too
            raise ValueError(f"a budget must be more than 0 seconds, got {self.budget_s}")
        if self.start < 0:
            self.start = self.now()

    def block_done(self) -> None:
        """Call as each block ends."""
        self.ends.append(self.now())

    def elapsed_s(self) -> float:
        return self.now() - self.start

    def block_s(self) -> float | None:
        """The next block's predicted seconds: the median of the blocks so far (the first
        left out once there are others); None before any block has ended."""
        marks = [self.start, *self.ends]
        times = [b - a for a, b in zip(marks, marks[1:], strict=False)]
        if not times:
            return None
        return statistics.median(times[1:] if len(times) > 1 else times)

    def blocks_left(self) -> int:
        """How many more blocks end within the budget, at the predicted time each."""
        per = self.block_s()
        left = self.budget_s - RESERVE_S - self.elapsed_s()
        if per is None or left <= 0:
            return 0
        return math.floor(left / per) if per > 0 else UNBOUNDED

    def to_dict(self) -> dict[str, float | int | None]:
        per = self.block_s()
        return {"budget_s": self.budget_s, "elapsed_s": round(self.elapsed_s(), 1),
                "block_s": round(per, 2) if per is not None else None,
                "blocks_timed": len(self.ends)}
