"""The one way hugelab runs a process: argv lists only, never a shell, each command logged.

`run` runs a short helper command to completion (text; `run_bytes` for binary input and
output). `start` starts a long-lived helper that hugelab watches and ends itself (QEMU, an ssh
client). `spawn` starts a workload process: in a new session, with the parent-death signal
(util-linux `setpriv --pdeathsig KILL`), and, inside a trial, with the trial's token
(`HUGELAB_TRIAL`) and private `TMPDIR` in its environment, and, while `join_cgroup` names a
cgroup (an arm's memory limit, hugelab.host.memcg), moved into that cgroup before it execs; the
trial scope
(hugelab.trial.contain.TrialScope) binds itself to the thread with `bind`, and `carry` hands it
to a worker thread of the same trial. `become` replaces this process with another, and
`wait_for` waits, with a timer, for one to get ready or to end.

A missing program is a ToolMissingError naming its package; a command that fails (with
`check`) or runs past its timeout is a CommandError carrying argv, exit code and stderr.
tests/test_proc.py checks that nothing else under hugelab/ starts a process."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

from hugelab.errors import CommandError, HostError, ToolMissingError

log = logging.getLogger("hugelab.proc")

# Debian package that provides each external tool hugelab's own machinery runs; workload kinds
# declare their tools themselves (hugelab.workloads.kind) and the registry adds them here.
APT_PACKAGES = {
    "qemu-system-x86_64": "qemu-system-x86",
    "cc": "gcc",
    "gcc": "gcc",
    "make": "make",
    "perf": "linux-perf",
    "numastat": "numactl",
}


def register_packages(packages: Mapping[str, str]) -> None:
    """Tool -> Debian package entries a workload kind declared, for package_of's hints."""
    for tool, package in packages.items():
        APT_PACKAGES.setdefault(tool, package)


def package_of(tool: str) -> str:
    """The Debian package that provides `tool` (by its basename), or the name itself."""
    name = Path(tool).name
    return APT_PACKAGES.get(name, name)


def which(tool: str) -> str:
    """Absolute path of `tool`, or ToolMissingError naming the apt package to install."""
    path = shutil.which(tool)
    if path is None:
        raise ToolMissingError(tool, package_of(tool))
    return path


def _missing(tool: str) -> ToolMissingError:
    return ToolMissingError(tool, package_of(tool))


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def run(
    argv: Sequence[str | Path],
    *,
    check: bool = True,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv (a list, never a shell string), capture text output, raise CommandError on
    failure (with `check`) or past `timeout`."""
    args = [str(a) for a in argv]
    log.debug("run: %s", shlex.join(args))
    try:
        cp = subprocess.run(  # noqa: S603 - argv list, no shell
            args, capture_output=True, text=True, timeout=timeout,
            env=dict(env) if env is not None else None, cwd=cwd, input=input, check=False)
    except FileNotFoundError as exc:
        raise _missing(args[0]) from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(args, -1, f"timed out after {timeout}s\n{_text(exc.stderr)}") from exc
    if check and cp.returncode != 0:
        raise CommandError(args, cp.returncode, cp.stderr)
    return cp


def run_bytes(argv: Sequence[str | Path], *, input: bytes | None = None, check: bool = True,
              timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
    """`run` with binary input and output (a file copied through ssh's stdin); stdin is
    /dev/null without `input`."""
    args = [str(a) for a in argv]
    log.debug("run: %s", shlex.join(args))
    feed: dict[str, Any] = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
    try:
        cp = subprocess.run(args, capture_output=True, timeout=timeout,  # noqa: S603 - argv list
                            check=False, **feed)
    except FileNotFoundError as exc:
        raise _missing(args[0]) from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(args, -1, f"timed out after {timeout}s\n{_text(exc.stderr)}") from exc
    if check and cp.returncode != 0:
        raise CommandError(args, cp.returncode, _text(cp.stderr))
    return cp


def start(argv: Sequence[str | Path], **popen: Any) -> subprocess.Popen[Any]:
    """Start a long-lived helper (QEMU, an ssh client running a guest's workload) that the
    caller waits for and ends itself: no trial token, no parent-death signal (a QEMU outlives
    a killed hugelab on record, for `hugelab recover`). `popen`: subprocess.Popen's options
    (stdin, stdout, stderr, start_new_session, env)."""
    args = [str(a) for a in argv]
    log.debug("start: %s", shlex.join(args))
    try:
        return subprocess.Popen(args, **popen)  # noqa: S603 - argv list, no shell
    except FileNotFoundError as exc:
        raise _missing(args[0]) from exc


def become(argv: Sequence[str]) -> NoReturn:
    """Replace this process with argv (os.execv: same pid, same environment)."""
    log.debug("become: %s", shlex.join(argv))
    try:
        os.execv(argv[0], list(argv))  # noqa: S606 - argv list, no shell
    except FileNotFoundError as exc:
        raise _missing(argv[0]) from exc


# --- workload processes ---------------------------------------------------------------------

TOKEN_VAR = "HUGELAB_TRIAL"  # the same name as hugelab.trial.procscan.TOKEN_VAR (a test checks)
_local = threading.local()
T = TypeVar("T")


class Scope(Protocol):
    """What spawn needs of a trial scope."""

    token: str
    scratch: str | None

    def add_session(self, pid: int) -> None: ...


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The current trial scope's sampling held off for the block (its `quiet()`), where the
    block's timing is the measurement; nothing outside a trial or for a scope without one."""
    hold = getattr(current(), "quiet", None)
    with hold() if callable(hold) else contextlib.nullcontext():
        yield


def bind(scope: Scope | None) -> None:
    """Make `scope` the current thread's trial scope (None: outside a trial)."""
    _local.scope = scope


def current() -> Scope | None:
    """The trial scope bound to this thread, if any."""
    return getattr(_local, "scope", None)


@contextlib.contextmanager
def bound(scope: Scope | None) -> Iterator[None]:
    old = current()
    bind(scope)
    try:
        yield
    finally:
        bind(old)


def carry(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` wrapped to run under the caller's scope, for a thread target."""
    scope = current()

    def run_bound(*args: Any, **kwargs: Any) -> T:
        with bound(scope):
            return fn(*args, **kwargs)
    return run_bound


_cgroup: dict[str, Path | None] = {"procs": None}


def join_cgroup(procs: Path | None) -> None:
    """From now on every workload process `spawn` starts inside a trial writes its own pid to
    `procs` (a cgroup's cgroup.procs file) before it execs, so all it allocates is charged to
    that cgroup; None: they stay in hugelab's own cgroup."""
    _cgroup["procs"] = procs


def cgroup() -> Path | None:
    """The cgroup.procs file trial processes join now (join_cgroup), or None."""
    return _cgroup["procs"]


def _joiner(procs: Path) -> Callable[[], None]:
    """The preexec step of a child that joins a cgroup: plain system calls only (it runs in
    the forked child of a threaded parent, before exec)."""
    target = os.fsencode(procs)

    def join() -> None:
        fd = os.open(target, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    return join


def _check_tool(tool: str) -> None:
    found = os.access(tool, os.X_OK) if "/" in tool else shutil.which(tool) is not None
    if not found:
        name = Path(tool).name
        raise ToolMissingError(name, package_of(name))


def spawn(argv: Sequence[str | Path], *, env: Mapping[str, str] | None = None,
          **popen: Any) -> subprocess.Popen[Any]:
    """Start a workload process (see the module docstring); ToolMissingError when argv[0] is
    not installed."""
    args = [str(a) for a in argv]
    _check_tool(args[0])
    scope = current()
    child_env = dict(os.environ if env is None else env)
    if scope is not None:
        child_env[TOKEN_VAR] = scope.token
        if scope.scratch:
            child_env["TMPDIR"] = scope.scratch
    setpriv = shutil.which("setpriv")
    full = [setpriv, "--pdeathsig", "KILL", "--", *args] if setpriv else args
    log.debug("spawn: %s", shlex.join(args))
    procs = _cgroup["procs"] if scope is not None else None
    if procs is not None:
        popen["preexec_fn"] = _joiner(procs)
    try:
        p = subprocess.Popen(full, env=child_env, start_new_session=True,  # noqa: S603 - argv
                             **popen)
    except subprocess.SubprocessError as exc:  # only the preexec step raises this here
        raise HostError(f"could not move {Path(args[0]).name} into its memory cgroup "
                        f"{procs.parent if procs else ''}: {exc}") from exc
    if scope is not None:
        scope.add_session(p.pid)
    return p


def wait_for(done: Callable[[], bool], timeout_s: float, *, interval_s: float = 0.05,
             unless: Callable[[], bool] | None = None) -> bool:
    """Poll `done` every `interval_s` until it holds (True), or until `timeout_s` has passed
    or `unless` holds (False; a server that exited while it was awaited). `done` is asked
    first, and once more after the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        if done():
            return True
        if unless is not None and unless():
            return False
        if time.monotonic() > deadline:
            return bool(done())
        time.sleep(interval_s)


def end(p: subprocess.Popen[Any], grace_s: float = 5.0) -> int:
    """End a child: SIGTERM, then SIGKILL once `grace_s` has passed without its exit; its exit
    status (the one "TERM, then KILL" for the processes hugelab started)."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            p.terminate()
        try:
            return p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
    return p.wait()
