"""stress-ng: argv, --metrics-brief and YAML parsers (live and saved 0.15.06 output), errors."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.stressng import StressNg, parse_brief, parse_yaml, yaml_metrics

DATA = Path(__file__).parent / "data"
needs_stressng = pytest.mark.skipif(shutil.which("stress-ng") is None,
                                    reason="stress-ng not installed (apt-get install stress-ng)")


@dataclass
class Recording:
    """NativeTarget that records argv and can add an argument to stress-ng's command line."""

    extra: list[str] = field(default_factory=list)
    seen: list[list[str]] = field(default_factory=list)
    name: str = "native"

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        self.seen.append(argv)
        if argv[0].endswith("stress-ng"):
            argv = [*argv, *self.extra]
        return NativeTarget().exec(argv, timeout=timeout)


def test_argv():
    assert StressNg("remap", 4, 60).argv() == [
        "stress-ng", "--remap", "4", "--timeout", "60s", "--metrics-brief"]
    argv = StressNg("vm", 2, 5, bytes_per_worker="64M").argv("/tmp/x/m.yaml")
    assert argv[-4:] == ["--vm-bytes", "64M", "--yaml", "/tmp/x/m.yaml"]


@pytest.mark.parametrize("kwargs", [{"stressor": "cpu"}, {"workers": 0},
                                    {"stressor": "remap", "bytes_per_worker": "1M"}])
def test_bad_config(kwargs):
    with pytest.raises(ExperimentError):
        StressNg(**kwargs)


def test_parse_saved_brief_and_yaml_agree():
    brief = parse_brief((DATA / "stress-ng-0.15.06-metrics-brief.txt").read_text())
    assert set(brief) == {"remap", "malloc", "mlock", "vm", "mmaphuge"}
    doc = parse_yaml((DATA / "stress-ng-0.15.06-metrics.yaml").read_text())
    assert doc["system-info"]["stress-ng-version"] == "0.15.06"
    assert doc["system-info"]["pagesize"] == 4096
    ym = yaml_metrics(doc)
    for name, row in brief.items():
        assert row["bogo_ops"] == ym[name]["bogo_ops"]
        assert row["bogo_ops_per_s_real"] == pytest.approx(ym[name]["bogo_ops_per_s_real"],
                                                           abs=0.01)
        assert row["bogo_ops_per_s_usr_sys"] == pytest.approx(ym[name]["bogo_ops_per_s_usr_sys"],
                                                          abs=0.01)
    # the "miscellaneous metrics" rows
    assert brief["remap"]["nanosecs_per_page_remap"] > 0
    assert "nanosecs_per_munlock_call" in brief["mlock"]


def test_parse_old_info_prefixed_rows():
    # the layout of older stress-ng, as in the mlock line users grep for
    text = "stress-ng: info:  [2649] mlock            21747      2.07      0.00      1.58     10519.09     13763.92\n"
    assert parse_brief(text)["mlock"]["bogo_ops_per_s_usr_sys"] == 13763.92


def test_parse_result_fields_and_note():
    text = (DATA / "stress-ng-0.15.06-metrics-brief.txt").read_text()
    yml = (DATA / "stress-ng-0.15.06-metrics.yaml").read_text()
    res = StressNg("vm", 1, 1).parse(ExecResult(["stress-ng"], 0, "", text, 1.2), yml)
    assert res.primary == "bogo_ops_per_s_real" and res.better == "higher"
    assert res.info["version"] == "0.15.06"
    assert "not a reliable metric" in res.info["note"]
    assert any("0 bogo ops" in w for w in res.info["warnings"])  # vm did 0 ops in 1 s
    assert res.evidence["yaml_metrics"]["bogo_ops"] == 0


def test_missing_stressor_rows_is_workload_error():
    out = "stress-ng: info:  [1] remap stressor will be skipped, not supported\n"
    with pytest.raises(WorkloadError, match="no metrics for stressor 'remap'"):
        StressNg("remap").parse(ExecResult(["stress-ng"], 0, "", out, 0.1))


@pytest.mark.tools
@needs_stressng
def test_live_brief_parse_and_run_end_to_end():
    w = StressNg("malloc", 1, 1)
    live = NativeTarget().exec(w.argv())
    assert parse_brief(live.stderr + live.stdout)["malloc"]["bogo_ops"] > 0
    target = Recording()
    res = w.run(target, "thp")
    assert res.value > 0 and res.metrics["bogo_ops"] > 0
    assert res.info["version"] and res.evidence["yaml_metrics"]["bogo_ops"] > 0
    assert "THP mode" in res.info["backing_note"]
    yaml_arg = next(a for argv in target.seen for a in argv if a.endswith("metrics.yaml"))
    assert not Path(yaml_arg).parent.exists(), "the temporary YAML directory is removed"


@pytest.mark.tools
@needs_stressng
def test_nonzero_exit_is_workload_error_with_stderr():
    with pytest.raises(WorkloadError) as ei:
        StressNg("remap", 1, 1).run(Recording(extra=["--no-such-option"]), "4k")
    assert "no-such-option" in ei.value.stderr  # type: ignore[attr-defined]


def test_missing_binary_names_the_package():
    target = Recording()
    with pytest.raises(ToolMissingError) as ei:
        StressNg(binary="/nonexistent/stress-ng").run(target, "4k")
    assert ei.value.package == "stress-ng"
    assert target.seen[-1][:2] == ["rm", "-rf"], "temporary directory cleaned up"
