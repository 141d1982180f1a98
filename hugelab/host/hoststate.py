"""The host state each arm's trials run in: as the host is, `fresh`, or `fragmented` to a stated
degree (an aged host, `hugelab.host.fragment`), as a resource the run holds.

    with HostStates(seed=exp.seed) as states:
        states.ensure("fragmented", 0.9)   # a holder started (18-30 s here), or the one kept
        ... the unit's trials ...
        states.record()                    # the measured state, for each trial's monitors
        states.ensure("fresh", None)       # the holder released: its pages freed

A holder is kept across consecutive units that want the same degree and replaced when the
degree changes, so a run that groups its arms pays the fragmenting once per change. Every
trial records the state it ran in, measured from /proc/buddyinfo (the unusable free space index
for 2 MiB pages), fragmented or not: a fresh host's index is its own (others' page cache), and
a fragmented trial whose measured index missed its target says so (`missed`), which flags it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hugelab.host import buddyinfo
from hugelab.host.fragment import Fragmenter, FragmentTarget
from hugelab.host.paths import REAL, HostPaths

FRESH, FRAGMENTED = "fresh", "fragmented"


def compact(paths: HostPaths = REAL) -> None:
    """Ask the kernel to compact all memory now (/proc/sys/vm/compact_memory: an action, no
    setting to put back); hosts without compaction are left as they are."""
    with contextlib.suppress(OSError):
        paths.compact_memory.write_text("1")


class HostStates:
    """The run's fragment holder, if any: started, kept, replaced and released by `ensure`."""

    def __init__(self, seed: int = 0, *, max_kb: int | None = None) -> None:
        self.seed = seed
        self.max_kb = max_kb
        self._frag: Fragmenter | None = None
        self._state: str | None = None

    def ensure(self, state: str | None, fragment: float | None) -> None:
        """The host in `state` for the next trials: a holder at `fragment` for "fragmented"
        (kept if it already holds that degree), none for "fresh"; None leaves it as it is."""
        if state is None:
            return
        was, self._state = self._state, state
        if state != FRAGMENTED:
            self.release()
            if was != state:  # fresh: as compact as this host gets, once per change
                compact()
            return
        assert fragment is not None
        if self._frag is not None and self._frag.target.unusable == fragment:
            return
        self.release()
        frag = Fragmenter(FragmentTarget(fragment, max_kb=self.max_kb, seed=self.seed))
        self._frag = frag.__enter__()

    def record(self) -> dict[str, Any]:
        """The state the next trials run in, measured now: {state, unusable, ...}; a
        fragmented host's also its target, what the holder made and `missed` (None: met)."""
        if self._frag is not None:
            return {"state": FRAGMENTED, **self._frag.measure()}
        now = buddyinfo.read().to_json()
        return {"state": self._state or "as found", "unusable": now["unusable"],
                "free_kb": now["free_kb"], "free_huge_kb": now["free_huge_kb"]}

    def release(self) -> None:
        if self._frag is not None:
            frag, self._frag = self._frag, None
            frag.release()

    def __enter__(self) -> HostStates:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
