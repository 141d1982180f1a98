"""A parallel build of a real C tree: `make clean` then timed `make -jN`.

The workload takes `source_dir`, a directory with a Makefile (any real make-based C project:
an unpacked upstream release, a Debian source tree, ...), and a `make_target` (default: make's
default goal). Each trial, on the Target and with Target.exec only (so it also runs in a guest
where `source_dir` is a path inside the guest):

  1. `mktemp -d -t` in $TMPDIR (under hugelab the trial's private directory, on /dev/shm, a
     tmpfs, so the disk stays out of the measurement and a killed run's copy is removed by
     `hugelab recover`; in a guest its /tmp, a tmpfs overlay); `scratch_dir` overrides it and
     `stat -f` records the filesystem type,
  2. `cp -a SOURCE/. COPY` (the source tree itself is never modified),
  3. `make -C COPY clean` (when `clean`), then the timed `make -C COPY -jN [TARGET]`,
  4. `rm -rf COPY`.

Primary: build wall time in seconds (lower). Also user/sys CPU time, minor/major page faults
and max RSS of make and all its children (wait4 rusage, as the Target reports it).
hugelab's own tests build a generated tree of ~50 translation units with cc; no real C
source tree ships with Debian's binary packages at a useful size, so point `source_dir` at one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hugelab.errors import ExperimentError, HugelabError
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
from hugelab.workloads.kind import Kind, Tool, key, keys_of, program, timeout
from hugelab.workloads.process_thp import check_mode, target_for
from hugelab.workloads.toolrun import (
    THP_ONLY_NOTE,
    check_backing,
    check_exit,
    first_version,
    rusage_metrics,
)

SHORT_BUILD_S = 1.0


def _first_line(target: Target, argv: list[str]) -> str:
    """First output line of a version query; '' when the tool is missing or fails."""
    try:
        res = target.exec(argv, timeout=30)
    except HugelabError:
        return ""
    lines = res.stdout.splitlines() if res.returncode == 0 else []
    return lines[0] if lines else ""


@dataclass(frozen=True)
class MakeBuild:
    """`make -jN` of a copy of `source_dir`; primary `wall_s` (lower is better)."""

    source_dir: str = key("", "the source tree make builds (copied per trial)")
    jobs: int = key(2, "make -j")
    make_target: str = key("", 'the make target ("": the default)')
    clean: bool = key(True, "make clean before each build")
    # scratch_dir "": $TMPDIR (the trial scope's directory under hugelab), else /tmp
    scratch_dir: str = key("", 'where the copy is built ("": the trial\'s own directory)')
    make_binary: str = key("make", program("make_binary", "make"))
    timeout_s: float = key(3600.0, timeout("a build"))
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    kind: str = field(default="build", init=False)

    def __post_init__(self) -> None:
        check_mode("build", self.process_thp)
        if not self.source_dir:
            raise ExperimentError("build: source_dir is required (a directory with a Makefile)")
        if self.jobs < 1:
            raise ExperimentError("build: jobs must be at least 1")
        if self.make_target.startswith("-"):
            raise ExperimentError(f"build: make_target {self.make_target!r} looks like an option")

    def mktemp_argv(self) -> list[str]:
        if not self.scratch_dir:
            return ["mktemp", "-d", "-t", "hugelab-build.XXXXXX"]
        return ["mktemp", "-d", "-p", self.scratch_dir, "hugelab-build.XXXXXX"]

    def copy_argv(self, dest: str) -> list[str]:
        return ["cp", "-a", "--", f"{self.source_dir.rstrip('/')}/.", dest]

    def clean_argv(self, dest: str) -> list[str]:
        return [self.make_binary, "-C", dest, "clean"]

    def build_argv(self, dest: str) -> list[str]:
        """The timed command (pure)."""
        argv = [self.make_binary, "-C", dest, f"-j{self.jobs}"]
        if self.make_target:
            argv.append(self.make_target)
        return argv

    def parse(self, res: ExecResult) -> WorkloadResult:
        """Metrics of the timed make (pure); WorkloadError with make's stderr when it failed."""
        check_exit(res, "make")
        metrics = rusage_metrics(res)
        warnings = []
        if res.wall_s < SHORT_BUILD_S:
            warnings.append(f"the build took {res.wall_s:.2f}s: too short to time reliably")
        if "user_s" not in metrics:
            warnings.append("the target gave no rusage: only wall time is known")
        info: dict[str, Any] = {"tool": "make", "jobs": self.jobs, "source_dir": self.source_dir,
                                "make_target": self.make_target or "(default goal)",
                                "warnings": warnings}
        return WorkloadResult(metrics=metrics, primary="wall_s", unit="s", better="lower",
                              info=info)

    def _prepare(self, target: Target) -> str:
        tmp = target.exec(self.mktemp_argv())
        check_exit(tmp, "mktemp")
        return tmp.stdout.strip()

    def run(self, target: Target, backing: str) -> WorkloadResult:
        check_backing(backing)
        target = target_for(target, self.process_thp)
        dest = self._prepare(target)
        try:
            check_exit(target.exec(self.copy_argv(dest)), "cp")
            if self.clean:
                check_exit(target.exec(self.clean_argv(dest)), "make clean")
            res = target.exec(self.build_argv(dest), timeout=self.timeout_s)
            fs = target.exec(["stat", "-f", "-c", "%T", dest]).stdout.strip()
        finally:
            target.exec(["rm", "-rf", "--", dest])
        result = self.parse(res)
        result.info["version"] = first_version(_first_line(target, [self.make_binary, "--version"]),
                                               r"^GNU Make (\S+)")
        result.info["cc"] = _first_line(target, ["cc", "--version"]) or None
        result.info["scratch_fs"] = fs or None
        result.info["backing"] = backing
        result.info["backing_note"] = THP_ONLY_NOTE
        return result


KIND = Kind(keys=keys_of(MakeBuild), name="build", workload=MakeBuild,
            summary="a make build of a source tree (compilers' memory), seconds to build",
            tools=(Tool("make", "make"),), duration=("timeout_s", None))
