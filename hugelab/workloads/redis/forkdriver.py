"""The fork driver of a trial with persistence: BGSAVE or BGREWRITEAOF at set moments during
the load, and the latency probe, in one thread of hugelab's own (see persist's docstring)."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.redis.forks import PROBE_INTERVAL_S, Fork, Outcome, fork_of, save_done
from hugelab.workloads.redis.resp import Conn

POLL_S = 0.01
SAVE_TIMEOUT_S = 300.0  # a save still running after this long fails the trial
KEY = "key:{:012d}"     # redis-benchmark's `key:__rand_int__` with -r: its GETs find these


class ForkDriver:
    """Saves at set moments during the load, and the latency probe, in one thread of its own
    (so the probe's samples and the saves' windows share one clock and never overlap)."""

    def __init__(self, port: int, mode: str, fork_every_s: float) -> None:
        self.port, self.mode, self.every = port, mode, fork_every_s
        self.stop = threading.Event()
        self.forks: list[Fork] = []
        self.samples: list[tuple[float, float]] = []
        self.error: BaseException | None = None
        self.reply_due = False  # a BGSAVE / BGREWRITEAOF sent, its reply not yet read
        self.thread = threading.Thread(target=self._main, name="hugelab-redis-forks",
                                       daemon=True)

    def start(self) -> ForkDriver:
        """AOF switched on (its first rewrite done) where asked, then the clock starts."""
        self.ctl, self.probe = Conn(self.port), Conn(self.port)
        try:
            if self.mode == "aof":  # its first rewrite: before the load, not counted
                self.ctl.call("CONFIG", "SET", "appendonly", "yes")
                since = time.monotonic()
                while not save_done(self.mode, self.ctl.info("persistence")):
                    if time.monotonic() - since > SAVE_TIMEOUT_S:
                        raise WorkloadError(f"redis's first AOF rewrite ran over "
                                            f"{SAVE_TIMEOUT_S:.0f} s")
                    time.sleep(POLL_S)
        except BaseException:
            self.close()
            raise
        self.t0 = time.monotonic()
        self.thread.start()
        return self

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.ctl.close()
            self.probe.close()

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # handed to outcome(), in the caller's thread
            self.error = exc

    def _loop(self) -> None:
        command = "BGSAVE" if self.mode == "rdb" else "BGREWRITEAOF"
        next_fork, started = self.t0 + self.every, None
        probe_key = KEY.format(0)
        while not self.stop.is_set():
            now = time.monotonic()
            if started is None and now >= next_fork:
                self.ctl.send(command)  # its reply comes once forked: read with the poll
                started, next_poll, self.reply_due = now, now + POLL_S, True
            elif started is not None and now >= next_poll:
                if self._ended(started):
                    started, next_fork = None, time.monotonic() + self.every
                next_poll = now + POLL_S
            t = time.monotonic()
            self.probe.call("GET", probe_key)
            self.samples.append((t - self.t0, time.monotonic() - t))
            time.sleep(max(0.0, t + PROBE_INTERVAL_S - time.monotonic()))
        if started is not None:  # the load ended during a save: its end is still waited for
            while not self._ended(started):
                time.sleep(POLL_S)

    def _ended(self, started: float) -> bool:
        """Whether the save begun at `started` ended; if so its record is taken."""
        if self.reply_due:  # the command's own reply (an error raises)
            self.ctl.reply()
            self.reply_due = False
        if not save_done(self.mode, self.ctl.info("persistence")):
            if time.monotonic() - started > SAVE_TIMEOUT_S:
                raise WorkloadError(f"a redis save ran over {SAVE_TIMEOUT_S:.0f} s")
            return False
        end = time.monotonic()
        self.forks.append(fork_of(self.mode, self.ctl.info(), started - self.t0, end - self.t0))
        return True

    def __enter__(self) -> ForkDriver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the probe and wait for a save in progress (the thread's last act)."""
        self.stop.set()
        self.thread.join(SAVE_TIMEOUT_S + 30)
        self.close()

    def outcome(self) -> Outcome:
        """What was seen, once stopped; WorkloadError when the driver failed or no save
        began during the load."""
        if self.thread.is_alive():
            raise WorkloadError("redis: the fork driver did not stop")
        if self.error is not None:
            if isinstance(self.error, WorkloadError):
                raise self.error
            raise WorkloadError(f"redis: the fork driver failed: {self.error}") from self.error
        if not self.forks:
            raise WorkloadError(f"redis: the load ended before its first save (fork_every_s "
                                f"{self.every:g})", hint="raise requests, or lower fork_every_s")
        arr = np.array(self.samples, dtype=float).reshape(-1, 2)
        return Outcome(self.forks, arr[:, 0], arr[:, 1])


def driver(port: int, mode: str, fork_every_s: float
           ) -> ForkDriver | contextlib.nullcontext[None]:
    """The fork driver and probe of a trial with persistence, for a `with` around its load
    (as None without persistence)."""
    return ForkDriver(port, mode, fork_every_s) if mode != "off" else contextlib.nullcontext()
