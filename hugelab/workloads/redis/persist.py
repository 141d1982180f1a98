"""Redis with persistence: forks for BGSAVE or an AOF rewrite during the load, and their price.

Redis's latency guide (redis-doc topics/latency.md) tells users to turn THP off: a fork for
BGSAVE or an AOF rewrite costs 9-13 ms per GB on bare metal (the page tables are copied), and
each copy-on-write fault of a 2 MiB page under THP is said to cost about 0.25 ms. On kernels
since 5.8 a write to a shared anonymous THP splits the PMD and copies 4 KiB (commit 3917c80280c9,
"thp: change CoW semantics for anon-THP"), so on a given host the claim is worth measuring.

`persistence = "rdb"`: the server runs with `--save ""` (no save points) in a private directory
(0700 under /var/tmp, removed after the trial, `hugelab recover` removes a killed run's), and
hugelab sends BGSAVE itself, first after `fork_every_s` seconds of load, then `fork_every_s`
after the previous save ended, for as long as the load lasts. `persistence = "aof"`: after any
preload `CONFIG SET appendonly yes` (its initial rewrite is waited for before the load, and not
counted), `--auto-aof-rewrite-percentage 0`, and BGREWRITEAOF at the same moments.

A save ends when the server says so (`rdb_bgsave_in_progress:0`, or `aof_rewrite_in_progress:0`
and `aof_rewrite_scheduled:0`, polled every 10 ms; the server itself notices its child's exit
in serverCron, 10 times a second at the default hz). Then hugelab reads INFO: per fork
`latest_fork_usec`, `rdb_last_cow_size` / `aof_last_cow_size` (the child's own private dirty
memory as it ended, Redis's COW figure), `mem_fragmentation_ratio` and `total_forks`:
evidence["forks"], and their medians and maxima in evidence["app_costs"].

A latency probe, a thread of hugelab (no process) with its own connection, sends one GET every
millisecond during the load and times it; BGSAVE is sent on a second connection without
waiting for its reply, so the probe's next GET queues behind the fork itself. Samples sent
between a save's start and its end are its window's (`forkwin_*_ms`), the others steady
(`steady_*_ms`): p50, p99, p99.9 and max, in ms. One request at a time, so a stall delays the
next sample (no coordinated-omission correction): the max is the stall, the percentiles count
it once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hugelab import proc
from hugelab.errors import ExperimentError, WorkloadError
from hugelab.workloads.base import Target, WorkloadResult
from hugelab.workloads.command import LOOPBACK
from hugelab.workloads.interleave import server_problem

MODES = ("off", "rdb", "aof")
PROBE_INTERVAL_S = 0.001
POLL_S = 0.01
SAVE_TIMEOUT_S = 300.0  # a save still running after this long fails the trial
KEY = "key:{:012d}"     # redis-benchmark's `key:__rand_int__` with -r: its GETs find these
PRIVATE_PREFIX = "hugelab-redis-"
PRIVATE_WORK = Path("/var/tmp")


def check(persistence: str, fork_every_s: float, preload: bool, keyspace: int | None) -> None:
    """The persistence keys of a redis workload; ExperimentError naming the key."""
    if persistence not in MODES:
        raise ExperimentError(f"redis: persistence must be one of {', '.join(MODES)}, "
                              f"got {persistence!r}",
                              hint='"rdb": BGSAVE during the load; "aof": appendonly yes and '
                                   'BGREWRITEAOF during the load')
    if not fork_every_s > 0:
        raise ExperimentError(f"redis: fork_every_s is seconds between saves, above 0, "
                              f"got {fork_every_s!r}")
    if preload and not keyspace:
        raise ExperimentError("redis: preload writes every key of keyspace; set keyspace")


def refuse_guest(persistence: str, arm: Any) -> None:
    """Persistence runs natively only (its files and the fork probe are this host's)."""
    if persistence != "off" and getattr(arm, "vm", None) is not None:
        raise ExperimentError(f"arm '{arm.name}': redis persistence runs on the host only for "
                              "now (its private directory, fork driver and latency probe are "
                              "this host's)", hint='persistence = "off" for guest arms')


def interleave_problem(arms: tuple[Any, ...], table: dict[str, Any]) -> tuple[str, str] | None:
    """Design "interleaved" with persistence: refused (every arm's server up at once, so one
    arm's fork would fall in another's windows)."""
    if table.get("persistence", "off") != "off":
        return ("redis persistence forks during one arm's load, and interleaved servers share "
                "the host at once", 'design = "paired" for persistence')
    return server_problem(arms, table)


def private_dir() -> Path:
    """A private directory (0700, named by this process) under /var/tmp."""
    return Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-", dir=PRIVATE_WORK))


def server_args(persistence: str, work: Path | None) -> list[str]:
    """Persistence switches of redis-server (pure): never a save point (hugelab sends every
    BGSAVE); a private `--dir` where persistence or a user's RDB needs one; AOF switched on
    at run time (CONFIG SET, after any preload) and never rewritten on its own."""
    args = ["--dir", str(work)] if work is not None else []
    args += ["--save", "", "--appendonly", "no"]
    if persistence == "aof":
        args += ["--auto-aof-rewrite-percentage", "0"]
    return args


def remove(work: Path | None) -> None:
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)


# -- RESP over a socket: enough for SET, GET, INFO, CONFIG SET, BGSAVE ----------------------------
def encode(*args: str | bytes) -> bytes:
    """A command as a RESP array of bulk strings (pure)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


def parse_reply(buf: bytes) -> tuple[bytes | int | None, int] | None:
    """One reply at the start of `buf` (pure): (value, bytes it took), or None while it is
    incomplete. Status lines as bytes, integers as int, a null bulk as None; an error reply
    raises WorkloadError with Redis's words."""
    head, sep, _ = buf.partition(b"\r\n")
    if not sep:
        return None
    took = len(head) + 2
    kind, body = head[:1], head[1:]
    if kind == b"-":
        raise WorkloadError(f"redis-server answered: {body.decode(errors='replace')}")
    if kind == b":":
        return int(body), took
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None, took
        if len(buf) < took + n + 2:
            return None
        return buf[took:took + n], took + n + 2
    return body, took


class Conn:
    """One connection to 127.0.0.1:port, its replies read in order."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((LOOPBACK, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, *args: str | bytes) -> None:
        self.sock.sendall(encode(*args))

    def reply(self) -> bytes | int | None:
        while (got := parse_reply(self.buf)) is None:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise WorkloadError("redis-server closed the connection")
            self.buf += chunk
        value, took = got
        self.buf = self.buf[took:]
        return value

    def call(self, *args: str | bytes) -> bytes | int | None:
        self.send(*args)
        return self.reply()

    def info(self, *sections: str) -> dict[str, str]:
        return parse_info(self.call("INFO", *sections))

    def close(self) -> None:
        self.sock.close()


def parse_info(text: bytes | str | int | None) -> dict[str, str]:
    """INFO's `field:value` lines as a dict (pure); section headers and blanks skipped."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    out: dict[str, str] = {}
    for line in str(text or "").splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and not key.startswith("#"):
            out[key] = value
    return out


def number(info: dict[str, str], key: str) -> float:
    """A numeric INFO field (pure); WorkloadError naming it when the server lacks it."""
    try:
        return float(info[key])
    except (KeyError, ValueError):
        raise WorkloadError(f"redis-server's INFO has no number {key!r}",
                            hint="Redis 6.2 or later reports fork and COW figures") from None


# server-side: SET key:%012d (redis-benchmark's keys) to `size` bytes for keys first..first+n-1
PRELOAD_LUA = ("local first, n = tonumber(ARGV[1]), tonumber(ARGV[2]) "
               "local v = string.rep('x', tonumber(ARGV[3])) "
               "for i = first, first + n - 1 do redis.call('SET', string.format('key:%012d', i), v) "
               "end return n")
PRELOAD_CHUNK = 100_000  # keys per script call: the server answers others between calls


def preload_argvs(cli: str, port: int, keyspace: int, size: int) -> list[list[str]]:
    """redis-cli calls that write every key `key:%012d` of the keyspace, `size` bytes each, by
    a Lua loop inside the server: run where the load's client runs (the host, or inside the
    guest of a user's domain, whose port the host cannot reach), in seconds even under TCG
    where a pipelined client took minutes."""
    return [[cli, "-h", LOOPBACK, "-p", str(port), "EVAL", PRELOAD_LUA, "0", str(first),
             str(min(PRELOAD_CHUNK, keyspace - first)), str(size)]
            for first in range(0, keyspace, PRELOAD_CHUNK)]


def preload(target: Target | None, cli: str, port: int, keyspace: int, size: int) -> None:
    """Every key of the keyspace SET before the load (`preload_argvs`), each call checked by
    the count it answers; on `target` (None: here, on the host)."""
    for argv in preload_argvs(cli, port, keyspace, size):
        if target is None:
            cp = proc.run(argv, check=False, timeout=600)
            code, out, err = cp.returncode, cp.stdout, cp.stderr
        else:
            r = target.exec(argv, timeout=600)
            code, out, err = r.returncode, r.stdout, r.stderr
        if code != 0 or out.strip().split()[-1:] != [argv[-2]]:
            raise WorkloadError(f"redis-server did not preload its keys: {argv[-2]} SETs "
                                f"answered {(out + err).strip()[:200]!r}")


# -- per fork: Redis's own figures, and the probe's samples split by its window -------------------
@dataclass(frozen=True)
class Fork:
    """One save, as Redis reported it when it ended; times in s from the load's start."""

    start_s: float
    end_s: float
    fork_usec: float          # latest_fork_usec
    cow_bytes: float          # rdb_last_cow_size or aof_last_cow_size
    fragmentation_ratio: float  # mem_fragmentation_ratio
    total_forks: float        # the server's total_forks after it


def fork_of(mode: str, info: dict[str, str], start_s: float, end_s: float) -> Fork:
    """A finished save's record from INFO (pure)."""
    cow = "rdb_last_cow_size" if mode == "rdb" else "aof_last_cow_size"
    return Fork(start_s, end_s, number(info, "latest_fork_usec"), number(info, cow),
                number(info, "mem_fragmentation_ratio"), number(info, "total_forks"))


def save_done(mode: str, info: dict[str, str]) -> bool:
    """Whether the save in progress has ended (pure); WorkloadError when it failed."""
    if mode == "rdb":
        busy = info.get("rdb_bgsave_in_progress") != "0"
        status = info.get("rdb_last_bgsave_status", "ok")
    else:
        busy = info.get("aof_rewrite_in_progress") != "0" or \
            info.get("aof_rewrite_scheduled") != "0"
        status = info.get("aof_last_bgrewrite_status", "ok")
    if not busy and status != "ok":
        raise WorkloadError(f"redis-server's {'BGSAVE' if mode == 'rdb' else 'BGREWRITEAOF'} "
                            f"failed (status {status}); see its log")
    return not busy


def split(times: np.ndarray, lat: np.ndarray, forks: list[Fork]
          ) -> tuple[np.ndarray, np.ndarray]:
    """The latencies of samples sent inside a fork window [start, end], and the others
    (pure)."""
    inside = np.zeros(len(times), dtype=bool)
    for f in forks:
        inside |= (times >= f.start_s) & (times <= f.end_s)
    return lat[inside], lat[~inside]


def tails(prefix: str, lat_s: np.ndarray) -> dict[str, float]:
    """p50, p99, p99.9 and max of latencies in s, as `<prefix>_p99_9_ms`... (pure); {} for
    no samples."""
    if not len(lat_s):
        return {}
    ms = np.asarray(lat_s) * 1e3
    p50, p99, p999 = np.percentile(ms, [50, 99, 99.9])
    return {f"{prefix}_p50_ms": float(p50), f"{prefix}_p99_ms": float(p99),
            f"{prefix}_p99_9_ms": float(p999), f"{prefix}_max_ms": float(ms.max())}


def app_costs(forks: list[Fork]) -> dict[str, float]:
    """The trial's application-own costs from its forks (pure): medians and maxima."""
    fork_ms = [f.fork_usec / 1e3 for f in forks]
    cow_kb = [f.cow_bytes / 1024 for f in forks]
    return {"forks": float(len(forks)),
            "fork_ms": statistics.median(fork_ms), "fork_max_ms": max(fork_ms),
            "cow_kb": statistics.median(cow_kb), "cow_max_kb": max(cow_kb),
            "fragmentation_ratio": statistics.median(f.fragmentation_ratio for f in forks)}


@dataclass
class Outcome:
    """What the driver saw: every fork, and the probe's samples (send time, latency, in s)."""

    forks: list[Fork]
    times: np.ndarray
    latencies: np.ndarray

    def record(self, result: WorkloadResult, mode: str, fork_every_s: float) -> None:
        """Into a trial's result: the probe's tails as metrics; the forks, their costs and
        the probe's sample counts as evidence."""
        inside, outside = split(self.times, self.latencies, self.forks)
        result.metrics.update({**tails("forkwin", inside), **tails("steady", outside)})
        result.evidence.update({
            "app_costs": app_costs(self.forks), "forks": [asdict(f) for f in self.forks],
            "persistence": {"mode": mode, "fork_every_s": fork_every_s,
                            "probe_interval_ms": PROBE_INTERVAL_S * 1e3,
                            "probe_samples_forkwin": len(inside),
                            "probe_samples_steady": len(outside)}})


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
