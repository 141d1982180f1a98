"""Redis's own THP switch (app disable-thp) and the 4 KiB arm under `hugelab-thp never`:
command lines, the app rule, and for real under host THP always, through the kind's own run
(its wrapped argv) and the runner's input to the rule (the trial's evidence)."""

from __future__ import annotations

from typing import Any

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import Arm
from hugelab.host.session import host_session
from hugelab.trial.appevidence import app_check
from hugelab.trial.evidence import CONTRADICTED, NOT_APPLICABLE, VERIFIED
from hugelab.trial.judge import judge_evidence, layer_checks
from hugelab.trial.native import NativeTarget
from hugelab.workloads.redis import RedisBenchmark, judge
from hugelab.workloads.redis.thp import check_redis
from hugelab.workloads.registry import build_workload, with_arm
from tests.hostguard import host_state, workload_processes


def redis(**kw: object) -> RedisBenchmark:
    app = tuple((k, v) for k, v in kw.items() if k == "disable-thp")
    arm = Arm("x", "4k", app=app, process_thp=kw.get("process_thp"))  # type: ignore[arg-type]
    return with_arm(build_workload("redis", {"requests": 20000, "clients": 8}),  # type: ignore[return-value]
                    arm)


def test_disable_thp_reaches_the_server_argv():
    assert redis().server_argv(1)[redis().server_argv(1).index("--disable-thp") + 1] == "no"
    yes = redis(**{"disable-thp": "yes"}).server_argv(1)
    assert yes[yes.index("--disable-thp") + 1] == "yes"
    with pytest.raises(ExperimentError, match="app disable-thp must be"):
        redis(**{"disable-thp": "maybe"})
    with pytest.raises(ExperimentError, match="unknown app setting 'maxmemory'"):
        with_arm(RedisBenchmark(), Arm("x", "4k", app=(("maxmemory", "1gb"),)))


def test_redis_rules():
    off = {"thp_enabled": 0, "anon_huge_kb": 0}
    on = {"thp_enabled": 1, "anon_huge_kb": 8192}
    assert check_redis(True, None, off).status == VERIFIED
    assert check_redis(True, None, on).status == CONTRADICTED
    early = check_redis(True, None, {"thp_enabled": 0, "anon_huge_kb": 6144})
    assert early.status == VERIFIED and "6.0 MiB faulted in THP before" in early.reason
    assert check_redis(True, None, {"thp_enabled": 1, "anon_huge_kb": 0}).status == NOT_APPLICABLE
    assert check_redis(False, None, on).status == VERIFIED
    assert check_redis(False, None, off).status == CONTRADICTED
    assert check_redis(False, "never", off).status == VERIFIED  # the wrapper, not Redis
    assert check_redis(False, None, {"thp_enabled": None}).status == NOT_APPLICABLE
    assert app_check({"redis": {"disable_thp": True}, "server": {}}, judge).status == NOT_APPLICABLE  # type: ignore[union-attr]


def test_a_server_that_switched_thp_off_itself_is_not_contradicted_by_its_arms_backing():
    """At the sizes users run (1.1 GB a server, bench/sizes/redis-1g.toml) the 6 MiB that Redis
    faulted in THP before its `disable-thp yes` took effect are 0.5% of its anonymous memory:
    the workload layer's 10% THP rule, from the arm's `backing = "thp"` (what the host
    offers), flagged every such trial. Where the app layer verifies that the switch decided,
    the workload layer says so and does not contradict; without the switch it still does."""
    arm = Arm("disable-thp", "thp", thp="always", app=(("disable-thp", "yes"),))
    tree = {"samples": 3, "processes": 2, "anon_kb": 1_363_148, "anon_huge_kb": 6144}
    ev: dict[str, Any] = {"tree": tree, "redis": {"disable_thp": True},
          "server": {"thp_enabled": 0, "anon_huge_kb": 6144}}
    checks = {c.layer: c for c in layer_checks(arm, ev, "native", "thp", 0.5, judge)}
    assert checks["app"].status == VERIFIED and checks["app"].governs
    assert checks["workload"].status == NOT_APPLICABLE, checks
    assert "only 6.0 MiB" in checks["workload"].reason and "own switch" in checks["workload"].reason
    assert judge_evidence(ev, list(checks.values()))[0] == VERIFIED
    assert ev["checks"]["app"]["governs"] is True and "governs" not in ev["checks"]["workload"]
    # the switch said no (THP kept), yet the server has almost none: still contradicted
    keep: dict[str, Any] = {**ev, "redis": {"disable_thp": False}, "server": {"thp_enabled": 1, "anon_huge_kb": 6144}}
    checks = {c.layer: c for c in layer_checks(arm, keep, "native", "thp", 0.5, judge)}
    assert checks["workload"].status == CONTRADICTED and not checks["app"].governs
    # a guest-judged app check travels as a dict, and keeps its governs
    assert app_check({"app": ev["checks"]["app"]}).governs  # type: ignore[union-attr]


@pytest.mark.host
@pytest.mark.slow
def test_disable_thp_and_hugelab_thp_never_under_host_always(tmp_path, monkeypatch):
    """Under host THP always: disable-thp yes makes redis-server switch THP off for itself
    (THP_enabled 0; what it faulted before stays THP) while disable-thp no keeps it with THP;
    under hugelab-thp never the server runs with THP_enabled 0 and no THP at all, even with
    disable-thp no."""
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before, procs = host_state(), workload_processes()
    with host_session(journal_path=tmp_path / "state" / "j") as control:
        control.set_thp("always", None)
        yes = redis(**{"disable-thp": "yes"}).run(NativeTarget(), "thp")
        no = redis(**{"disable-thp": "no"}).run(NativeTarget(), "thp")
        never = redis(**{"disable-thp": "no", "process_thp": "never"}).run(NativeTarget(), "4k")
    assert host_state() == before and workload_processes() == procs
    for out, server_thp in ((yes, 0), (no, 1), (never, 0)):
        check = app_check(out.evidence, judge)
        assert check is not None and check.status == VERIFIED, out.evidence
        assert out.evidence["server"]["thp_enabled"] == server_thp, out.evidence["server"]
    assert no.evidence["server"]["anon_huge_kb"] > 0
    assert never.evidence["server"]["anon_huge_kb"] == 0  # wrapped before its first page
