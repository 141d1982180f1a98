"""An arm's process_thp: the hugelab-thp wrapper (prctl PR_SET_THP_DISABLE, with
PR_THP_DISABLE_EXCEPT_ADVISED for madvise), how kinds wrap their processes, and the process
layer's evidence, for real under host THP `always`."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.experiment import Arm, Experiment
from hugelab.host.session import host_session
from hugelab.runner import Runner
from hugelab.store import Store
from hugelab.trial.appevidence import app_check, check_process
from hugelab.trial.evidence import CONTRADICTED, NOT_APPLICABLE, VERIFIED
from hugelab.trial.native import NativeTarget
from hugelab.trial.procscan import thp_enabled, unadvised_thp_kb
from hugelab.workloads import build, process_thp
from hugelab.workloads.command import CommandWorkload
from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.registry import build_workload, with_arm
from hugelab.workloads.sysbench import SysbenchMemory
from tests.hostguard import host_state, workload_processes


@pytest.fixture(scope="module")
def thp_bin() -> Path:
    return build.ensure_hugelab_thp()


@pytest.mark.tools
def test_the_wrapper_builds_without_a_warning(tmp_path):
    stderr = build.compile_binary(build.THP_SOURCES, tmp_path / "ht", build.THP_CFLAGS)
    assert stderr == "" and (tmp_path / "ht").stat().st_mode & 0o111


def _status(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.mark.tools
def test_never_disables_thp_for_the_program_and_its_children(thp_bin):
    mine = _status(["grep", "THP_enabled", "/proc/self/status"]).stdout
    child = _status([str(thp_bin), "never", "sh", "-c", "grep THP_enabled /proc/self/status"])
    assert thp_enabled(mine) == 1 and thp_enabled(child.stdout) == 0 and child.returncode == 0


@pytest.mark.tools
def test_madvise_is_probed_and_either_works_or_says_why(thp_bin):
    probe = _status([str(thp_bin), "probe", "madvise"])
    run = _status([str(thp_bin), "madvise", "grep", "THP_enabled", "/proc/self/status"])
    if probe.returncode == 0:  # Linux 6.18+: THP stays on, only for madvised mappings
        assert run.returncode == 0 and thp_enabled(run.stdout) == 1
        assert process_thp.unsupported("madvise") is None
    else:
        assert probe.returncode == 3 and "Linux 6.18" in probe.stderr
        assert run.returncode == 3 and run.stdout == ""
        assert "Linux 6.18" in (process_thp.unsupported("madvise") or "")


@pytest.mark.parametrize("argv, rc, words", [
    (["always", "true"], 2, "unknown mode 'always'"),
    (["never"], 2, "usage:"),
    (["probe", "sometimes"], 2, "usage:"),
    (["never", "/nonexistent/prog"], 127, "cannot run /nonexistent/prog"),
])
@pytest.mark.tools
def test_the_wrapper_refuses_bad_input_clearly(thp_bin, argv, rc, words):
    cp = _status([str(thp_bin), *argv])
    assert cp.returncode == rc and words in cp.stderr


@pytest.mark.tools
def test_wrap_resolves_the_program_and_names_a_missing_package(thp_bin):
    assert process_thp.wrap(["true"], None) == ["true"]
    wrapped = process_thp.wrap(["sysbench", "memory"], "never")
    assert wrapped[:2] == [str(thp_bin), "never"] and wrapped[2].endswith("/sysbench")
    with pytest.raises(ToolMissingError):
        process_thp.wrap(["no-such-tool-xyz"], "never")

    class Guest:
        name = "vm0"
    with pytest.raises(WorkloadError, match="natively only"):
        process_thp.wrap(["true"], "never", Guest())


@pytest.mark.tools
def test_every_process_of_a_wrapped_target_runs_under_the_mode():
    target = process_thp.target_for(NativeTarget(), "never")
    res = target.exec(["grep", "THP_enabled", "/proc/self/status"])
    assert res.argv == ["grep", "THP_enabled", "/proc/self/status"]  # unwrapped in results
    assert thp_enabled(res.stdout) == 0
    assert process_thp.target_for(NativeTarget(), None).__class__ is NativeTarget


def test_kinds_take_process_thp_from_the_arm_and_check_it():
    arm = Arm("n", "4k", process_thp="never")
    for kind in ("sysbench", "stress-ng", "iperf3", "redis", "command", "build"):
        params = {"argv": ["true"]} if kind == "command" else \
            {"source_dir": "/tmp"} if kind == "build" else {}
        w = with_arm(build_workload(kind, params), arm)
        assert w.process_thp == "never", kind  # type: ignore[attr-defined]
    with pytest.raises(ExperimentError, match="process_thp must be one of never, madvise"):
        dataclasses.replace(SysbenchMemory(), process_thp="always")
    with pytest.raises(ExperimentError, match="runs its workload in guests"):
        from hugelab.experiment.model import VmLayer
        with_arm(RedisBenchmark(), Arm("g", "4k", vm=VmLayer(), process_thp="never"))


def _tree(on: dict[str, int], off: dict[str, int], stray: dict[str, int] | None = None
          ) -> dict[str, object]:
    return {"samples": 3, "thp_enabled_by_comm": on, "thp_disabled_by_comm": off,
            "unadvised_thp_kb_by_comm": stray or {}}


def test_process_rules():
    never = check_process("never", _tree({}, {"redis-server": 1, "redis-benchmar": 1}))
    assert never.status == VERIFIED and never.layer == "process"
    bad = check_process("never", _tree({"redis-benchmar": 1}, {"redis-server": 1}))
    assert bad.status == CONTRADICTED and "THP_enabled is 1 in redis-benchmar" in bad.reason
    assert check_process("never", _tree({"perf": 1}, {"x": 1})).status == VERIFIED  # harness
    assert check_process("never", _tree({"hugelab-thp": 1}, {"x": 1})).status == VERIFIED
    assert check_process("never", _tree({"setpriv": 1}, {"x": 1})).status == VERIFIED  # its fork
    assert check_process("madvise", _tree({"x": 1}, {})).status == VERIFIED
    stray = check_process("madvise", _tree({"x": 1}, {}, {"x": 4096}))
    assert stray.status == CONTRADICTED and "4.0 MiB of THP lie outside" in stray.reason
    assert check_process("never", {}).status == NOT_APPLICABLE
    assert check_process("never", _tree({}, {})).status == NOT_APPLICABLE
    assert app_check({"app": {"status": VERIFIED, "reason": "r"}}).layer == "app"  # type: ignore[union-attr]
    assert app_check({}) is None


def test_unadvised_thp_counts_only_mappings_without_hg():
    smaps = ("7f00-7f80 rw-p 0 00:00 0\nAnonHugePages:  2048 kB\nVmFlags: rd wr mr mw me ac hg\n"
             "7f80-7fc0 rw-p 0 00:00 0\nAnonHugePages:  4096 kB\nVmFlags: rd wr mr mw me ac\n"
             "7fc0-7fd0 rw-p 0 00:00 0\nAnonHugePages:  0 kB\nVmFlags: rd wr\n")
    assert unadvised_thp_kb(smaps) == 4096


TOUCH = ("import time; b = bytearray(64 << 20); b[::4096] = b'x' * (16384); time.sleep(1.5)")


@pytest.mark.host
@pytest.mark.slow
def test_process_thp_under_host_always_for_real(tmp_path, monkeypatch):
    """Under host THP always a Python process touching 64 MiB gets THP; wrapped in `never` it
    gets none and every process says THP_enabled 0; wrapped in `madvise` (6.18+) it gets none
    outside madvised mappings. The rules contradict the unwrapped tree."""
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before, procs = host_state(), workload_processes()
    arms = [Arm("plain", "thp", thp="always"),
            Arm("never", "4k", thp="always", process_thp="never")]
    if process_thp.unsupported("madvise") is None:
        arms.append(Arm("madvise", "4k", thp="always", process_thp="madvise"))
    workload = CommandWorkload(argv=(sys.executable, "-c", TOUCH))
    exp = Experiment("pthp", tuple(arms), {"kind": "command"}, seed=1, blocks=1,
                     baseline="plain")
    per_arm = {a.name: with_arm(workload, a) for a in arms}
    with Store(tmp_path / "s.db") as store:
        out = Runner(exp, store, workload, target=NativeTarget(), workloads=per_arm,
                     session=lambda: host_session(journal_path=tmp_path / "state" / "j")).run()
        trials = {t["arm"]: t for t in store.trials(out.run_id)}
    assert host_state() == before and workload_processes() == procs
    plain = trials["plain"]["evidence"]
    assert trials["plain"]["status"] == "ok" and plain["tree"]["anon_huge_kb"] > 0
    assert check_process("never", plain["tree"]).status == CONTRADICTED
    assert check_process("madvise", plain["tree"]).status == CONTRADICTED
    for name in [a.name for a in arms if a.process_thp]:
        ev = trials[name]["evidence"]
        assert trials[name]["status"] == "ok", ev
        assert ev["checks"]["process"]["status"] == VERIFIED, ev["checks"]
        assert ev["checks"]["workload"]["status"] == VERIFIED, ev["checks"]
        assert ev["tree"]["anon_huge_kb"] == 0
