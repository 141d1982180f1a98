"""THP tunables (khugepaged max_ptes_none, shrink_underused) and memory_limit as arm settings:
parsed with line numbers, refused where a host lacks them, journaled and restored, planned by
the dry run. Fake sysfs trees (the sysfs-root seam) for hosts this machine is not: a kernel
before 6.12, a host without a memory controller, a cgroup v2 host."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hugelab import proc
from hugelab.errors import ExperimentError, HostError
from hugelab.experiment import Arm, Experiment, load_experiment
from hugelab.experiment.parse import parse_experiment
from hugelab.host import memcg
from hugelab.host.control import HostControl
from hugelab.host.inspect import inspect_host
from hugelab.host.journal import Journal
from hugelab.host.paths import THP_DIR, HostPaths
from hugelab.planning.arms import arm_tunables, unsupported_arms
from hugelab.planning.dryrun import memory_cgroups, tunables
from hugelab.runner import apply_arm
from tests.fakehost import FakeKernel, make_host

HEAD = 'name = "s"\n[workload]\nkind = "hugelab-mem"\n'
ARMS = HEAD + """
[[arms]]
name = "never"
backing = "4k"
thp = "never"

[[arms]]
name = "shrinker"
backing = "thp"
thp = "always"
thp_max_ptes_none = 409
thp_shrink_underused = true
memory_limit = "256M"
"""


def parse(text: str, tmp_path: Path) -> Experiment:
    p = tmp_path / "e.toml"
    p.write_text(text)
    return load_experiment(p)


def test_arm_keys_parse_and_keep_old_identities(tmp_path):
    exp = parse(ARMS, tmp_path)
    arm = exp.arms[1]
    assert (arm.thp_max_ptes_none, arm.thp_shrink_underused, arm.memory_limit) == \
        (409, True, 256 << 20)
    assert Experiment.from_dict(json.loads(json.dumps(exp.to_dict()))) == exp
    # an arm that sets none of them keeps the identity it had before the keys existed
    plain = exp.to_dict()["arms"][0]
    assert not {"thp_max_ptes_none", "thp_shrink_underused", "memory_limit"} & set(plain)
    assert parse(ARMS.replace('memory_limit = "256M"', 'memory_limit = "none"'),
                 tmp_path).arms[1].memory_limit is None


@pytest.mark.parametrize("old,new,words", [
    ("thp_max_ptes_none = 409", "thp_max_ptes_none = -1", "thp_max_ptes_none = -1"),
    ("thp_max_ptes_none = 409", 'thp_max_ptes_none = "409"', "must be an integer"),
    ("thp_shrink_underused = true", 'thp_shrink_underused = "yes"', "true or false"),
    ('memory_limit = "256M"', 'memory_limit = "lots"', "write a size"),
    ('memory_limit = "256M"', "memory_limit = 256", "write a size"),
    ('memory_limit = "256M"', 'memory_limit = "4M"', "below 16M"),
])
def test_bad_values_name_their_line(tmp_path, old, new, words):
    line = next(i for i, ln in enumerate(ARMS.splitlines(), 1) if ln == old)
    with pytest.raises(ExperimentError) as e:
        parse(ARMS.replace(old, new), tmp_path)
    assert f"line {line}:" in e.value.message and words in e.value.message, e.value.message


def test_memory_limit_is_refused_with_guests(tmp_path):
    text = ARMS.replace('memory_limit = "256M"', 'memory_limit = "256M"\n[arms.vm]\nmem = "1G"')
    with pytest.raises(ExperimentError, match="memory_limit goes with native arms") as e:
        parse(text, tmp_path)
    line = text.splitlines().index('memory_limit = "256M"') + 1
    assert f"line {line}:" in e.value.message
    # the THP tunables are the host's: a guest arm may set them
    ok = parse(text.replace('memory_limit = "256M"\n', ""), tmp_path)
    assert ok.arms[1].thp_max_ptes_none == 409 and ok.arms[1].vm is not None


@pytest.mark.parametrize("design", ["duet", "interleaved"])
def test_arms_run_at_once_must_share_them(tmp_path, design):
    text = ARMS.replace('thp = "never"\n', 'thp = "always"\n').replace(
        'name = "s"\n', f'name = "s"\ndesign = "{design}"\n')
    with pytest.raises(ExperimentError, match="memory_limit"):
        parse(text, tmp_path)


def test_a_factor_sweeps_them():
    exp = parse_experiment({"workload": {"kind": "hugelab-mem"},
                            "base": {"backing": "thp", "thp": "always"},
                            "factors": {"memory_limit": ["none", "512M"],
                                        "thp_max_ptes_none": [511, 409]}})
    got = {(a.memory_limit, a.thp_max_ptes_none) for a in exp.arms}
    assert got == {(None, 511), (None, 409), (512 << 20, 511), (512 << 20, 409)}


# --- fake hosts ------------------------------------------------------------------------------

def shrinker_host(root: Path, *, shrink: bool = True) -> HostPaths:
    """A fake 6.12+ host: max_ptes_none 511, shrink_underused 1 (0 without `shrink`: the
    file is missing, as before 6.12)."""
    host = make_host(root)
    (host.p(THP_DIR) / "hpage_pmd_size").write_text("2097152\n")
    host.max_ptes_none.write_text("511\n")
    if shrink:
        host.shrink_underused.write_text("1\n")
    return host


def v1_memcg(host: HostPaths) -> Path:
    root = host.host_path("/sys/fs/cgroup/memory")
    root.mkdir(parents=True)
    (root / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    host.mounts.write_text(host.mounts.read_text() +
                           "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n")
    return root


def v2_memcg(host: HostPaths, subtree: str = "cpu memory") -> Path:
    root = host.host_path("/sys/fs/cgroup")
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text(subtree + "\n")
    host.mounts.write_text(host.mounts.read_text() +
                           "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec 0 0\n")
    return root


def fake_rmdir(cgroup: Path, root: Path) -> None:
    """cgroupfs removes a cgroup with its interface files; a plain tree needs rmtree."""
    shutil.rmtree(cgroup, ignore_errors=True)


def control(host: HostPaths, tmp_path: Path, **kw) -> HostControl:
    return HostControl(host, Journal(tmp_path / "state" / "journal.json"), writer=FakeKernel(),
                       rmdir=fake_rmdir, **kw)


@pytest.fixture(autouse=True)
def no_cgroup_left():
    yield
    proc.join_cgroup(None)


def test_tunables_journaled_then_restored(tmp_path):
    host = shrinker_host(tmp_path / "root")
    c = control(host, tmp_path)
    c.set_max_ptes_none(409)
    c.set_shrink_underused(False)
    c.set_shrink_underused(False)  # unchanged: no second entry
    assert host.max_ptes_none.read_text() == "409" and host.shrink_underused.read_text() == "0"
    assert [(Path(e["path"]).name, e["old"]) for e in c.journal.entries] == \
        [("max_ptes_none", "511"), ("shrink_underused", "1")]
    with pytest.raises(HostError, match=r"0 \.\. 511"):
        c.set_max_ptes_none(512)
    c.restore()
    assert host.max_ptes_none.read_text() == "511" and host.shrink_underused.read_text() == "1"


def test_a_kernel_before_6_12_refuses_the_shrinker(tmp_path):
    host = shrinker_host(tmp_path / "root", shrink=False)
    c = control(host, tmp_path)
    with pytest.raises(HostError, match="shrink_underused came in Linux 6.12; this is 6.1.0"):
        c.set_shrink_underused(True)
    info = inspect_host(host)
    assert "shrink_underused" not in info["thp"] and info["thp"]["max_ptes_none_limit"] == 511
    exp = parse(ARMS, tmp_path)
    why = unsupported_arms(exp, info)
    assert list(why) == ["shrinker"] and "no THP shrinker for underused" in why["shrinker"]
    assert arm_tunables(exp.arms[0], info) == {"max_ptes_none": 511}


def test_a_host_without_max_ptes_none_or_memcg_skips_the_arm(tmp_path):
    host = make_host(tmp_path / "root")  # no khugepaged/max_ptes_none, no cgroups
    info = inspect_host(host)
    assert info["memcg"] == {"supported": False, "reason": memcg.UNSUPPORTED}
    arm = Arm("a", "thp", thp_max_ptes_none=409)
    assert "no khugepaged max_ptes_none" in unsupported_arms(Experiment("e", (arm,)), info)["a"]
    arm = Arm("a", "4k", memory_limit=1 << 30)
    assert "no memory cgroup controller" in \
        unsupported_arms(Experiment("e", (arm,)), info)["a"]
    with pytest.raises(HostError, match="memory_limit needs a memory cgroup"):
        control(host, tmp_path).set_memory_limit(1 << 30)
    with pytest.raises(HostError, match="no khugepaged max_ptes_none"):
        control(host, tmp_path).set_max_ptes_none(409)


def test_memcg_v1_trial_cgroups_are_journaled_first_and_removed(tmp_path):
    host = shrinker_host(tmp_path / "root")
    root = v1_memcg(host)
    c = control(host, tmp_path)
    first = c.set_memory_limit(256 << 20)
    assert first is not None and first.parent.parent == root
    entry = json.loads(c.journal.path.read_text())["entries"][0]
    assert entry == {"kind": "memcg", "path": str(first.parent), "root": str(root),
                     "version": 1}
    assert (first / "memory.limit_in_bytes").read_text() == str(256 << 20)
    assert proc.cgroup() == first / "cgroup.procs"
    second = c.set_memory_limit(128 << 20)  # the next trial: a fresh cgroup, the old one gone
    assert second is not None and not first.exists() and second.name == "trial-2"
    assert len(c.journal) == 1  # one session cgroup, journaled once
    c.set_memory_limit(None)
    assert not second.exists() and proc.cgroup() is None
    c.set_memory_limit(64 << 20)
    assert c.restore() == [f"removed memory cgroup {first.parent}"]
    assert not first.parent.exists() and proc.cgroup() is None


def test_memcg_v2_writes_memory_max_and_enables_the_controller(tmp_path):
    host = shrinker_host(tmp_path / "root")
    v1_memcg(host)  # hybrid: v1 memory hierarchy, but v2 offers memory: v2 wins
    root = v2_memcg(host)
    info = inspect_host(host)
    assert info["memcg"]["version"] == 2 and info["memcg"]["limit_file"] == "memory.max"
    c = control(host, tmp_path)
    trial = c.set_memory_limit(1 << 30)
    assert trial is not None and trial.parent.parent == root
    assert (trial / "memory.max").read_text() == str(1 << 30)
    assert (trial.parent / "cgroup.subtree_control").read_text() == "+memory"
    (trial / "memory.current").write_text("4096\n")
    (trial / "memory.peak").write_text("1048576\n")
    (trial / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    (trial / "memory.stat").write_text("anon 4096\nanon_thp 2097152\n")
    assert memcg.trial_counters() == {
        "memcg_limit_bytes": 1 << 30, "memcg_usage_bytes": 4096, "memcg_peak_bytes": 1048576,
        "memcg_limit_hits": 7, "memcg_high_events": 0, "memcg_oom_kill": 1,
        "memcg_anon_thp_bytes": 2097152, "memcg_version": 2}
    c.restore()
    assert not trial.parent.exists()


def test_memcg_v2_root_without_memory_for_children_is_refused(tmp_path):
    host = shrinker_host(tmp_path / "root")
    v2_memcg(host, subtree="cpu")
    c = control(host, tmp_path)
    with pytest.raises(HostError, match=r"does not offer the memory controller") as e:
        c.set_memory_limit(1 << 30)
    assert "+memory" in (e.value.hint or "") and len(c.journal) == 0


def test_apply_arm_sets_the_arms_and_puts_back_the_found_values(tmp_path):
    host = shrinker_host(tmp_path / "root")
    v1_memcg(host)
    info = inspect_host(host)
    exp = parse(ARMS, tmp_path)
    c = control(host, tmp_path)
    apply_arm(c, exp.arms[1], info, ("madvise", "madvise"))
    assert host.max_ptes_none.read_text() == "409" and host.shrink_underused.read_text() == "1\n"
    assert proc.cgroup() is not None
    apply_arm(c, exp.arms[0], info, ("madvise", "madvise"))
    assert host.max_ptes_none.read_text() == "511" and proc.cgroup() is None
    c.restore()
    assert host.max_ptes_none.read_text() == "511" and not c.journal.path.exists()


def test_dry_run_shows_what_each_arm_changes(tmp_path):
    host = shrinker_host(tmp_path / "root")
    v1_memcg(host)
    info = inspect_host(host)
    exp = parse(ARMS, tmp_path)
    assert tunables(exp.arms[1], info) == [
        {"knob": "max_ptes_none", "value": 409, "host": 511, "unchanged": False},
        {"knob": "shrink_underused", "value": True, "host": True, "unchanged": True}]
    cg = memory_cgroups(list(exp.arms), info)
    assert cg is not None and cg["version"] == 1 and cg["limits"] == {"shrinker": 256 << 20}
    from hugelab.cli.dryrun import tunables_lines
    lines = tunables_lines({"cells": [{"name": a.name, "thp_tunables": tunables(a, info)}
                                      for a in exp.arms],
                            "host_changes": {"memory_cgroups": cg}})
    assert lines[1] == "  shrinker: max_ptes_none 409 (now 511)"
    assert lines[2].startswith("memory cgroups (cgroup v1, memory.limit_in_bytes under ")
    assert lines[2].endswith("shrinker 256.0 MiB")
    dry = HostControl(host, Journal(tmp_path / "j.json"), dry_run=True)
    dry.set_max_ptes_none(409)
    dry.set_memory_limit(256 << 20)
    assert dry.commands[0].startswith("echo 409 > ") and "mkdir -p" in dry.commands[1]
    assert dry.commands[2].endswith("/memory.limit_in_bytes")
