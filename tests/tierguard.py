"""Keeps the test markers honest: a test with none of the machine markers (the quick tier,
`./bootstrap test --quick`) may run Python and a few coreutils, nothing else.

A quick test that starts a server, boots QEMU, compiles C or runs a Debian tool fails here with
the program's name and the marker it needs, in every run (quick or full), so a marker that lies
is found on the next run rather than on the next machine without the package. The check is on
the programs this pytest process starts; what a `python -m hugelab.cli` child starts in turn is
not seen (a quick test that runs the CLI as a subprocess only asks for help, a dry run or a
report).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

# what a test needs, as markers: a test carrying none of these is in the quick tier
MACHINE_MARKERS = ("host", "vm", "server", "tools", "slow")

# programs a quick test may start: the interpreter and what every Debian has (coreutils,
# util-linux's setpriv, which hugelab.proc puts in front of every program it spawns)
ALLOWED = {"cp", "mv", "rm", "cat", "true", "false", "sleep", "sh", "bash", "env", "uname",
           "id", "nproc", "getconf", "ls", "mkdir", "mktemp", "stat", "kill", "echo", "test"}
WRAPPERS = {"setpriv", "systemd-run", "nice", "taskset"}
PYTHON = re.compile(r"python3?(\.\d+)?$")


class TierViolation(AssertionError):
    """A test without a machine marker started a program it is not allowed to."""


def is_quick(node: Any) -> bool:
    """Whether a test (its pytest item) carries none of the machine markers."""
    return all(node.get_closest_marker(m) is None for m in MACHINE_MARKERS)


def unwrapped(argv: Sequence[str]) -> list[str]:
    """The argv of the program a command runs, looking through a wrapper such as setpriv
    (`setpriv --pdeathsig KILL -- prog ...`: the program is the one after `--`)."""
    argv = [str(a) for a in argv]
    if argv and os.path.basename(argv[0]) in WRAPPERS:
        rest = argv[1:]
        if "--" in rest:
            return unwrapped(rest[rest.index("--") + 1:])
        paths = [i for i, a in enumerate(rest) if a.startswith("/")]  # options take no paths here
        return unwrapped(rest[paths[0]:]) if paths else argv
    return argv


def program_of(argv: Sequence[str]) -> str:
    """The basename of the program an argv runs (through wrappers)."""
    inner = unwrapped(argv)
    return os.path.basename(inner[0]) if inner else ""


def _made_here_or_missing(prog: str) -> bool:
    """A program the test wrote under the temporary directory (a copy of sleep named like
    QEMU), or one that does not exist (the test checks the error): no package either way."""
    found = shutil.which(prog)
    if found is None:
        return True
    return os.path.realpath(found).startswith(os.path.realpath(tempfile.gettempdir()) + os.sep)


def allowed(argv: Sequence[str]) -> bool:
    """Whether a quick test may start this argv."""
    inner = unwrapped(argv)
    name = os.path.basename(inner[0]) if inner else ""
    return (name in ALLOWED or bool(PYTHON.match(name)) or name == os.path.basename(sys.executable)
            or _made_here_or_missing(inner[0] if inner else ""))


class Guard:
    """Wraps subprocess.Popen once per session; while a quick test is set up or runs (its
    fixtures included, a session-wide server started for it too), starting any program beyond
    Python and coreutils raises. Teardown is not guarded: a session fixture's server stops in
    whichever test comes last."""

    def __init__(self) -> None:
        self.nodeid: str | None = None
        self.violation: str | None = None  # kept: the code under test may catch the error
        self._original = subprocess.Popen.__init__

    def install(self) -> None:
        original, guard = self._original, self

        def guarded(popen: subprocess.Popen[Any], args: Any, *a: Any, **k: Any) -> None:
            if guard.nodeid is not None:
                argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
                guard.check([os.fsdecode(x) for x in argv])
            original(popen, args, *a, **k)

        subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]

    def check(self, argv: list[str]) -> None:
        if not allowed(argv):
            self.violation = (
                f"{self.nodeid} has no machine marker but starts {program_of(argv)!r} "
                f"({' '.join(argv[:4])}): mark it `server` (a real server), `tools` (a compiler "
                f"or a Debian tool), `host` or `vm` (pyproject.toml lists them)")
            raise TierViolation(self.violation)

    @contextmanager
    def watching(self, item: Any) -> Iterator[None]:
        """Guard while `item` (a pytest item) is set up or called, if it is a quick test."""
        self.nodeid = item.nodeid if is_quick(item) else None
        self.violation = None
        try:
            yield
        finally:
            self.nodeid = None
        if self.violation is not None:
            pytest.fail(self.violation, pytrace=False)
