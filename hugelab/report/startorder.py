"""The verdict intervals of a request-interleaved run, adjusted for start order.

Every arm's server of a request-interleaved block runs at once, started in the block's order
(each trial's position), and start order moves what a server serves. `--until-verdict`
subtracts each block's start-slot contrast from its log-ratio at every look
(hugelab.stats.startslot, hugelab.stopping); the report's comparisons use the same adjusted
log-ratios for the same run, so its intervals and the stopping decision never disagree. A run
whose looks were made without the adjustment (recorded before it existed) keeps its plain
intervals, as does every other design.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hugelab.report.runload import RunData
from hugelab.stats import startslot


@dataclass(frozen=True)
class StartOrder:
    """A run's log values and start slots (blocks x series) and its fitted slot effects."""

    log_values: NDArray[np.float64]
    slots: NDArray[np.int64]
    fitted: startslot.SlotFit

    @property
    def note(self) -> str:
        return self.fitted.sentence()

    def candidate(self, base: int, cand: int, b: NDArray[np.float64]) -> NDArray[np.float64]:
        """Candidate values whose log-ratios to `b` (the baseline's values of the blocks where
        both series have one, in block order) are the adjusted ones."""
        d = startslot.adjust(self.log_values, self.slots, cand, base, self.fitted)
        out: NDArray[np.float64] = b * np.exp(d)
        return out


def start_order(data: RunData, blocks: NDArray[np.int64], values: NDArray[np.float64]
                ) -> StartOrder | None:
    """The adjustment for a request-interleaved run (blocks: the matrix's block labels;
    values: its blocks x series ok values, NaN elsewhere), or None: another design, a run
    whose looks were not adjusted, or too few complete blocks to fit slot effects."""
    exp = data.run.get("experiment") or {}
    seq = data.run.get("sequential") or {}
    if exp.get("design") != "interleaved" or data.position is None or \
            (seq and not seq.get("start_slot_adjusted")) or len(set(data.series_target)) > 1 \
            or not data.request_level():
        return None
    slots = np.full(values.shape, -1, dtype=np.int64)
    slots[np.searchsorted(blocks, data.block), data.code] = data.position
    with np.errstate(invalid="ignore", divide="ignore"):
        logv = np.log(values)
    found = startslot.fit(logv, slots)
    return None if found is None else StartOrder(logv, slots, found)
