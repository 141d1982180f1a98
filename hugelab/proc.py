"""The one way hugelab runs a process: argv lists only, never a shell."""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from hugelab.errors import CommandError, ToolMissingError

log = logging.getLogger("hugelab.proc")

# Debian package that provides each external tool hugelab may run.
APT_PACKAGES = {
    "sysbench": "sysbench",
    "stress-ng": "stress-ng",
    "iperf3": "iperf3",
    "redis-server": "redis-server",
    "redis-benchmark": "redis-tools",
    "qemu-system-x86_64": "qemu-system-x86",
    "cc": "gcc",
    "gcc": "gcc",
    "make": "make",
    "perf": "linux-perf",
    "numastat": "numactl",
}


def which(tool: str) -> str:
    """Absolute path of `tool`, or ToolMissingError naming the apt package to install."""
    path = shutil.which(tool)
    if path is None:
        raise ToolMissingError(tool, APT_PACKAGES.get(tool, tool))
    return path


def run(
    argv: Sequence[str | Path],
    *,
    check: bool = True,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv (a list, never a shell string), capture text output, raise CommandError on failure."""
    args = [str(a) for a in argv]
    log.debug("run: %s", shlex.join(args))
    try:
        cp = subprocess.run(  # noqa: S603 - argv list, no shell
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            input=input,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ToolMissingError(args[0], APT_PACKAGES.get(Path(args[0]).name, args[0])) from exc
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise CommandError(args, -1, f"timed out after {timeout}s\n{err}") from exc
    if check and cp.returncode != 0:
        raise CommandError(args, cp.returncode, cp.stderr)
    return cp
