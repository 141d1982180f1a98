"""One root error class with typed subclasses. Only the CLI prints and exits."""

from __future__ import annotations

import difflib
import os
import sys
import traceback
from collections.abc import Iterable


def did_you_mean(word: str, known: Iterable[str], quote: str = "'") -> str | None:
    """"did you mean 'x'?" for the one of `known` closest to `word`; None when none is close."""
    close = difflib.get_close_matches(word, sorted(known), n=1)
    return f"did you mean {quote}{close[0]}{quote}?" if close else None


class HugelabError(Exception):
    """Base of every error hugelab reports to a user: a message and an optional hint."""

    exit_code = 1
    # Why a trial failed, for resume: "environment" (a killed run, a guest that did not boot:
    # retried on resume), "pool" (another user of a hugetlb pool took the pages: retried too)
    # or "workload" (the workload itself failed: kept as failed unless the user asks for
    # --retry-failed).
    cause = "environment"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(HugelabError):
    """Bad command-line input."""

    exit_code = 2


class ExperimentError(HugelabError):
    """An experiment file is malformed or asks for something impossible. `key` and `arm` say
    where in the file, when the error comes from past the parse (a workload's key, an arm's
    `app`): hugelab.experiment.parse.locate turns them into the file's line."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None, *, key: str | None = None,
                 arm: str | None = None) -> None:
        super().__init__(message, hint)
        self.key = key
        self.arm = arm


class NotRootError(HugelabError):
    """A host-changing command was started without root."""

    exit_code = 3


class HostError(HugelabError):
    """Reading or changing host huge-page settings failed."""

    exit_code = 4


class PoolError(HostError):
    """A hugetlb pool could not reach its requested size."""


class CommandError(HugelabError):
    """An external command failed; carries argv, exit code and stderr."""

    cause = "workload"

    def __init__(self, argv: list[str], returncode: int, stderr: str, hint: str | None = None):
        # the program's own words first (a one-line reason shows them), its command line last
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()][-5:]
        prog = os.path.basename(str(argv[0])) if argv else "command"
        said = f": {tail[0]}" if tail else ""
        msg = "\n  ".join([f"{prog} failed (exit {returncode}){said}", *tail[1:],
                           f"command: {' '.join(str(a) for a in argv)}"])
        super().__init__(msg, hint)
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr


class ToolMissingError(HugelabError):
    """A program a workload needs is not installed."""

    def __init__(self, tool: str, package: str) -> None:
        super().__init__(f"'{tool}' is not installed", hint=f"install it with: apt-get install {package}")
        self.tool = tool
        self.package = package


class WorkloadError(HugelabError):
    """A workload failed or produced output hugelab could not understand."""

    cause = "workload"


class PoolBusyError(WorkloadError):
    """The workload could not get the huge pages its pool was reserved with (another process
    took them, or holds them so that the pool cannot grow): a fault of the environment, with
    a cause of its own ("pool") so that a report can say so, retried on resume."""

    cause = "pool"


# Causes of failed trials that resume runs again: faults of the host, not of the workload.
RETRIED_CAUSES = ("environment", "pool")


class StoreError(HugelabError):
    """The results store cannot be read or written."""


class StoreConnectionLost(StoreError):
    """The connection to a server store went away (a restart, a failover, a network cut):
    a run rides it out (`hugelab.store.outage`) for a while before it stops."""


class StoreUnreachable(StoreError):
    """A server store did not answer when the run opened it (down, restarting, failing over):
    a run waits for it (`hugelab.store.outage.open_waiting`) for a while before it gives up."""


class VMError(HugelabError):
    """A guest failed to boot or to run its trial."""


class FleetError(HugelabError):
    """The fleet could not be driven (no source to ship, Ansible missing, a bad inventory)."""


def internal_error(exc: BaseException) -> str:
    """An unexpected exception (a bug) that fails one trial: its traceback on stderr, for the
    report a user files, and 'internal error (please report it): <its one line>' for the
    trial's error."""
    sys.stderr.write("hugelab: internal error in a trial; please report it with this:\n"
                     + traceback.format_exc())
    why = "".join(traceback.format_exception_only(exc)).strip()
    return f"internal error (please report it): {why}"
