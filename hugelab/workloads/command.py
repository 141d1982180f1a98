"""Any user command as a workload, plus the helpers the tool workloads share.

`CommandWorkload` runs an argv list (never a shell) and takes its metric from the wall time
(default), from a JSON key path in its stdout, or from a regex with one group over its output.

Shared helpers used by the other workload modules live here too: `check_exit` (non-zero exit
-> WorkloadError with the output tail), `format_size`, the backing vocabulary, and the pluggable
server side of client/server workloads (`ServerSide`, `LocalServer`) used by iperf3 and redis.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.experiment.backings import BACKINGS as BACKINGS
from hugelab.experiment.backings import BACKINGS_SELF_REQUESTED, backing_error
from hugelab.proc import end, package_of, spawn, wait_for
from hugelab.workloads.base import Better, ExecResult, Place, Target, WorkloadResult, place_of
from hugelab.workloads.kind import Key, Kind
from hugelab.workloads.process_thp import check_mode, target_for

LOOPBACK = "127.0.0.1"  # the only address any hugelab network workload uses

THP_ONLY_NOTE = ("this workload cannot request huge pages itself: its backing is set only by "
                 "the host/guest THP mode (and, inside a guest, by the VM's memory backing)")


# --- shared helpers ----------------------------------------------------------------------

def tail(text: str, lines: int = 10) -> str:
    """The last `lines` non-empty lines of `text`."""
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


_ERROR_WORDS = re.compile(r"(?i)\b(error|invalid|fatal|fail(ed|ure)?|cannot|can't|unable|"
                          r"unrecognized|unknown|denied|not found)\b")


def error_summary(text: str, lines: int = 8) -> str:
    """The lines of `text` that say what went wrong (first 5), then its last `lines` lines.

    Tools like redis-benchmark print the reason first and a long usage text after it."""
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    key = [ln for ln in kept if _ERROR_WORDS.search(ln)][:5]
    rest = [ln for ln in kept[-lines:] if ln not in key]
    if key and rest and kept.index(rest[0]) > kept.index(key[-1]) + 1:
        key.append("...")
    return "\n".join(key + rest)


def failure_text(tool: str, res: ExecResult) -> str:
    """`tool exited with N: <its own first error line>`, then its other lines, then the
    command: a report's one-line reason (a "why failed" cell) shows what the tool said, not the
    start of a long command line."""
    err = error_summary(res.stderr) or error_summary(res.stdout) or "(no output)"
    first, *rest = err.splitlines()
    return "\n  ".join([f"{tool} exited with {res.returncode}: {first}", *rest,
                         f"command: {shlex.join(str(a) for a in res.argv)}"])


def check_exit(res: ExecResult, tool: str) -> None:
    """WorkloadError carrying the stderr tail (stdout tail when stderr is empty) on failure."""
    if res.returncode == 0:
        return
    exc = WorkloadError(failure_text(tool, res))
    exc.stderr = res.stderr  # type: ignore[attr-defined]
    exc.stdout = res.stdout  # type: ignore[attr-defined]
    exc.returncode = res.returncode  # type: ignore[attr-defined]
    raise exc


def check_backing(backing: str) -> None:
    """A backing an outside program can have: its memory is set by the host's knobs."""
    problem = backing_error(backing)
    if problem:
        raise WorkloadError(problem)
    if backing in BACKINGS_SELF_REQUESTED:
        raise WorkloadError(f"backing {backing!r} needs a workload that maps its own memory "
                            "that way (hugelab-mem); this program cannot be told to",
                            hint="use hugelab-mem, or thp / mthp-<size> with the arm's "
                                 "thp = \"always\"")


def format_size(n: int) -> str:
    """Bytes -> the shortest exact K/M/G/T form the tools accept ('2M', '1536K', '1000')."""
    for suffix, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def first_version(text: str, pattern: str) -> str | None:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1) if m else None


def rusage_metrics(res: ExecResult) -> dict[str, float]:
    """wall/user/sys time and page faults of one finished process (what the target gave)."""
    out = {"wall_s": res.wall_s}
    names = {"utime_s": "user_s", "stime_s": "sys_s", "minflt": "minflt", "majflt": "majflt",
             "maxrss_kb": "maxrss_kb"}
    for src, dst in names.items():
        if src in res.rusage:
            out[dst] = float(res.rusage[src])
    return out


# --- the server side of client/server workloads ------------------------------------------

class ServerHandle(Protocol):
    """A started server. `client_port` is where a client on the client's host connects to
    127.0.0.1 (for a guest server reached through a port forward: the forwarded host port)."""

    client_port: int

    def stop(self) -> str:
        """Stop the server (if still running) and return the tail of its output."""
        ...


class ServerSide(Protocol):
    """Starts a server from an argv built for the port it must listen on.

    `argv_for_port(port)` returns the server's argv for listening on 127.0.0.1:port. A guest
    implementation runs it in the guest and returns the host end of the port forward."""

    def start(self, argv_for_port: Callable[[int], list[str]], tool: str) -> ServerHandle: ...


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def listening(port: int, proc_net: Path = Path("/proc/net/tcp")) -> bool:
    """Whether something LISTENs on 127.0.0.1:port (or 0.0.0.0:port), read from /proc/net/tcp.

    Read instead of probing with connect(): a probe connection would count as the one client
    of `iperf3 -s -1`."""
    try:
        return listens(proc_net.read_text(), port)
    except OSError:
        return False


def listens(proc_net_tcp: str, port: int) -> bool:
    """Whether a /proc/net/tcp text shows a LISTEN socket on 127.0.0.1 or 0.0.0.0:port
    (pure; a guest's text too)."""
    want = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    for line in proc_net_tcp.splitlines()[1:]:
        cols = line.split()
        if len(cols) > 3 and cols[1] in want and cols[3] == "0A":
            return True
    return False


@dataclass
class _LocalHandle:
    client_port: int
    proc: subprocess.Popen[str]
    log: IO[str]
    tool: str

    def stop(self) -> str:
        try:
            end(self.proc)
        finally:
            self.log.seek(0)
            text = self.log.read()
            self.log.close()
        return tail(text, 50)


@dataclass
class LocalServer:
    """Runs the server as a subprocess of this process on 127.0.0.1 (the native case).

    `port=None` picks a free port. Output goes to a temporary file, so a chatty server never
    blocks on a full pipe."""

    port: int | None = None
    ready_timeout_s: float = 10.0

    def start(self, argv_for_port: Callable[[int], list[str]], tool: str) -> ServerHandle:
        port = self.port if self.port is not None else free_port()
        argv = argv_for_port(port)
        log = tempfile.TemporaryFile("w+", prefix=f"hugelab-{tool}-")
        try:
            proc = spawn(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         text=True)  # contained in the trial's scope, so its tree is evidence
        except (FileNotFoundError, ToolMissingError) as exc:
            log.close()
            name = Path(argv[0]).name
            raise ToolMissingError(name, package_of(name)) from exc
        handle = _LocalHandle(port, proc, log, tool)
        if not wait_for(lambda: listening(port), self.ready_timeout_s, interval_s=0.02,
                        unless=lambda: proc.poll() is not None):
            why = (f"exited with {proc.returncode}" if proc.poll() is not None
                   else f"did not listen on {LOOPBACK}:{port} within {self.ready_timeout_s}s")
            out = handle.stop()
            raise WorkloadError(f"{tool} server {why}: {' '.join(argv)}\n  "
                                + (out or "(no output)").replace("\n", "\n  "))
        return handle


def server_memory(handle: ServerHandle) -> dict[str, object]:
    """The running server's own THP picture (hugelab.workloads.servermem), read just
    before it stops; {} for a server this process cannot see (one in a guest). A handle
    with its own `memory()` (a server in a user's domain) reads it through the way in."""
    from hugelab.workloads.servermem import process_memory
    own = getattr(handle, "memory", None)
    if callable(own):
        return dict(own())
    proc = getattr(handle, "proc", None)
    pid = getattr(proc, "pid", None)
    return process_memory(pid) if isinstance(pid, int) else {}


def default_server(server: ServerSide | None, target: Target, tool: str,
                   port: int | None = None) -> ServerSide:
    """The server side to use: the given one, or a LocalServer (on `port` if the workload
    names one) when the client runs natively."""
    if server is not None:
        return server
    if place_of(target) is not Place.NATIVE:
        raise WorkloadError(
            f"{tool}: the client runs in target {getattr(target, 'name', '?')!r} but no server "
            "side was given; pass server=... (a ServerSide reachable from that target on "
            f"{LOOPBACK})")
    return LocalServer(port=port)


# --- the command workload ---------------------------------------------------------------

MetricSource = Literal["wall", "json", "regex"]
Stream = Literal["stdout", "stderr", "both"]


def json_lookup(data: Any, path: str) -> Any:
    """Follow a dotted key path ('end.sum_received.bits_per_second', list indices as
    numbers: 'results.0.value') through parsed JSON."""
    cur = data
    for part in path.split("."):
        if isinstance(cur, list):
            try:
                cur = cur[int(part)]
            except (ValueError, IndexError) as exc:
                raise KeyError(part) from exc
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(part)
    return cur


@dataclass(frozen=True)
class CommandWorkload:
    """A user command (argv list, run without a shell) and where its metric comes from.

    metric="wall": the primary metric is `wall_s` (unit s, lower is better by default).
    metric="json": stdout is JSON; `json_path` (dotted, list indices as numbers) names a number.
    metric="regex": `regex` has exactly one group matching a number, searched in `stream`.
    The user declares `better` and `unit`; `name` is the primary metric's name."""

    argv: tuple[str, ...] = ()
    metric: MetricSource = "wall"
    json_path: str | None = None
    regex: str | None = None
    stream: Stream = "both"
    better: Better = "lower"
    unit: str = "s"
    name: str = "value"
    timeout_s: float | None = None
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    kind: str = field(default="command", init=False)

    def __post_init__(self) -> None:
        argv = tuple(self.argv) if isinstance(self.argv, list | tuple) else self.argv
        if not isinstance(argv, tuple) or not argv or not all(isinstance(a, str) for a in argv):
            raise ExperimentError("command: argv must be a non-empty list of strings "
                                  "(it is run without a shell)")
        object.__setattr__(self, "argv", argv)
        if self.metric not in ("wall", "json", "regex"):
            raise ExperimentError(f"command: metric must be wall, json or regex, not {self.metric!r}")
        if self.better not in ("lower", "higher"):
            raise ExperimentError(f"command: better must be lower or higher, not {self.better!r}")
        if self.stream not in ("stdout", "stderr", "both"):
            raise ExperimentError(f"command: stream must be stdout, stderr or both, not {self.stream!r}")
        if self.metric == "json" and not self.json_path:
            raise ExperimentError("command: metric 'json' needs json_path (e.g. 'result.ops_per_s')")
        if self.metric == "regex":
            self._compiled()
        check_mode("command", self.process_thp)

    def _compiled(self) -> re.Pattern[str]:
        if not self.regex:
            raise ExperimentError("command: metric 'regex' needs regex with one group")
        try:
            pat = re.compile(self.regex, re.MULTILINE)
        except re.error as exc:
            raise ExperimentError(f"command: bad regex {self.regex!r}: {exc}") from exc
        if pat.groups != 1:
            raise ExperimentError(f"command: regex {self.regex!r} must have exactly one group, "
                                  f"it has {pat.groups}")
        return pat

    @property
    def primary(self) -> str:
        return "wall_s" if self.metric == "wall" else self.name

    def argv_list(self) -> list[str]:
        return list(self.argv)

    def extract(self, res: ExecResult) -> float:
        """The primary value from one finished run (pure)."""
        if self.metric == "wall":
            return res.wall_s
        if self.metric == "json":
            return self._from_json(res.stdout)
        text = {"stdout": res.stdout, "stderr": res.stderr,
                "both": res.stdout + "\n" + res.stderr}[self.stream]
        m = self._compiled().search(text)
        if m is None:
            raise WorkloadError(f"command: regex {self.regex!r} matched nothing in its {self.stream}"
                                f"\n  {tail(text, 5) or '(no output)'}")
        try:
            return float(m.group(1))
        except ValueError as exc:
            raise WorkloadError(f"command: regex group matched {m.group(1)!r}, not a number") from exc

    def _from_json(self, stdout: str) -> float:
        assert self.json_path is not None
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"command: stdout is not JSON ({exc})\n  {tail(stdout, 5)}") from exc
        try:
            value = json_lookup(data, self.json_path)
        except KeyError as exc:
            raise WorkloadError(f"command: JSON key path {self.json_path!r} not found "
                                f"(missing {exc.args[0]!r})") from exc
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise WorkloadError(f"command: {self.json_path!r} is {value!r}, not a number")
        try:
            return float(value)
        except ValueError as exc:
            raise WorkloadError(f"command: {self.json_path!r} is {value!r}, not a number") from exc

    def parse(self, res: ExecResult) -> WorkloadResult:
        """Metrics of one finished run (pure); WorkloadError when it failed."""
        check_exit(res, Path(res.argv[0]).name if res.argv else "command")
        metrics = rusage_metrics(res)
        metrics[self.primary] = self.extract(res)
        info: dict[str, Any] = {"tool": "command", "version": None, "argv": list(res.argv),
                                "metric_source": self.metric, "warnings": []}
        return WorkloadResult(metrics=metrics, primary=self.primary, unit=self.unit,
                              better=self.better, info=info)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        check_backing(backing)
        result = self.parse(target_for(target, self.process_thp).exec(self.argv_list(),
                                                                     timeout=self.timeout_s))
        result.info["backing"] = backing
        result.info["backing_note"] = THP_ONLY_NOTE
        return result



def exchange(port: int, data: bytes | None, timeout: float = 2.0) -> bytes:
    """Connect to 127.0.0.1:port, send `data`, return what comes back first (b"" on EOF): a
    server's readiness probe or stopper, through a guest's port forward or on the host."""
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
        if data:
            s.sendall(data)
        return s.recv(256)


KEYS = (  # the [workload] keys, for docs/kinds.md
    Key('argv', '', 'the program and its arguments (no shell)'),
    Key('metric', '',
        'what is measured: its wall time, a number in its JSON output or one its output matches'),
    Key('json_path', '', 'metric "json": the number\'s path ("a.b.0")'),
    Key('regex', '', 'metric "regex": one group matching the number'),
    Key('stream', '', 'which output the json or regex metric reads'),
    Key('better', '', 'whether a lower or higher value is better'),
    Key('unit', '', "the metric's unit, for the report"),
    Key('name', '', "the metric's name, for the report"),
    Key('timeout_s', 's', 'the longest a run may take (none: no limit)'),
)


KIND = Kind(keys=KEYS, name="command", workload=CommandWorkload,
            summary="any command of yours, its metric from its output (regex) or its wall time",
            duration=("timeout_s", None))
