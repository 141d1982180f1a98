"""Multi-size THP and shmem THP knobs on fake sysfs trees: a kernel without them (before
Linux 6.8) and one with them (this machine's layout), without touching the real host."""

from __future__ import annotations

import json

import pytest

from hugelab.cli.host import mthp_line
from hugelab.errors import HostError
from hugelab.experiment import Arm, Experiment
from hugelab.host.control import HostControl
from hugelab.host.inspect import inspect_host
from hugelab.host.journal import Journal
from hugelab.host.paths import parse_selected
from hugelab.planning.arms import arm_thp_knobs, unsupported_arms
from tests.fakehost import FakeKernel, add_mthp, make_host

OLD_KERNEL = "multi-size THP is not supported by this kernel (added in Linux 6.8; this is 6.1.0-fake)"


def control(host, tmp_path) -> HostControl:
    return HostControl(host, Journal(tmp_path / "state" / "journal.json"), writer=FakeKernel())


@pytest.fixture
def old(tmp_path):
    return make_host(tmp_path / "old")


@pytest.fixture
def new(tmp_path):
    return add_mthp(make_host(tmp_path / "new"))


def mode(path) -> str:
    return parse_selected(path.read_text())


def test_kernel_without_mthp_gives_the_clear_error(old, tmp_path):
    c = control(old, tmp_path)
    with pytest.raises(HostError) as exc:
        c.set_mthp(64, "always")
    assert exc.value.message == OLD_KERNEL
    with pytest.raises(HostError, match=r"added in Linux 6\.8; this is 6\.1\.0-fake"):
        c.set_shmem_thp("advise", 64)
    assert len(c.journal) == 0


def test_inspect_and_runner_on_a_kernel_without_mthp(old):
    info = inspect_host(old)
    assert info["mthp"] == {"supported": False, "reason": OLD_KERNEL}
    assert mthp_line(info) == f"[bold]multi-size THP[/] {OLD_KERNEL}"
    exp = Experiment("e", (Arm("4k", "4k"), Arm("m", "mthp-64K"), Arm("s", "shmem-thp")))
    skipped = unsupported_arms(exp, info)
    assert skipped["m"] == OLD_KERNEL
    assert "no THP for shmem" in skipped["s"] and "4k" not in skipped


def test_inspect_lists_the_sizes_and_their_modes(new):
    info = inspect_host(new)
    sizes = {s["size"]: s for s in info["mthp"]["sizes"]}
    assert info["mthp"]["supported"] and list(sizes)[:2] == ["8K", "16K"]
    assert sizes["8K"]["enabled"] is None and sizes["8K"]["shmem_enabled"] == "never"
    assert sizes["64K"]["enabled"] == "never" and sizes["2M"]["enabled"] == "inherit"
    assert info["thp"]["shmem_enabled"] == "never"
    line = mthp_line(info)
    assert "anon: 16K never, 32K never" in line and "2M inherit" in line
    assert "shmem_enabled=never (per size: 8K never" in line


def test_each_size_set_journaled_and_restored(new, tmp_path):
    c = control(new, tmp_path)
    for size in new.mthp_anon_sizes_kb():
        c.set_mthp(size, "always")
        assert mode(new.mthp_enabled(size)) == "always"
    c.set_shmem_thp("advise")
    c.set_shmem_thp("advise", 2048)
    assert len(c.journal) == 10
    assert {e["old"] for e in c.journal.entries} == {"never", "inherit"}
    c.restore()
    assert mode(new.mthp_enabled(64)) == "never" and mode(new.mthp_enabled(2048)) == "inherit"
    assert mode(new.shmem_enabled) == "never" and mode(new.mthp_shmem_enabled(2048)) == "inherit"
    assert not c.journal.path.exists()


def test_bad_sizes_and_modes_change_nothing(new, tmp_path):
    c = control(new, tmp_path)
    with pytest.raises(HostError, match="offers no 8 KiB multi-size THP for anonymous memory"):
        c.set_mthp(8, "always")
    with pytest.raises(HostError, match="not valid"):
        c.set_mthp(64, "sometimes")
    with pytest.raises(HostError, match="not valid"):
        c.set_shmem_thp("inherit")  # only per-size knobs have inherit
    assert len(c.journal) == 0


def test_arm_knobs(new):
    info = inspect_host(new)
    anon, shmem = arm_thp_knobs(Arm("m", "mthp-64K"), info)
    assert anon[64] == "madvise" and set(v for k, v in anon.items() if k != 64) == {"never"}
    assert shmem[None] == "never"  # as found
    anon, _ = arm_thp_knobs(Arm("m", "mthp-1M", thp="always"), info)
    assert anon[1024] == "always" and anon[2048] == "never"
    anon, shmem = arm_thp_knobs(Arm("s", "shmem-thp"), info)
    assert anon[2048] == "inherit" and anon[64] == "never"  # as found
    assert shmem[None] == "advise" and shmem[2048] == "inherit" and shmem[8] == "never"
    found = arm_thp_knobs(Arm("t", "thp"), info)
    assert found[0] == {s: ("inherit" if s == 2048 else "never")
                        for s in (16, 32, 64, 128, 256, 512, 1024, 2048)}


def test_a_thp_arm_turns_a_pmd_size_found_never_back_to_inherit(new, tmp_path):
    """A host whose 2 MiB knob is `never` (an admin, or an mthp run killed before it could
    restore) gives `enabled = always` no THP at all: a thp arm puts it to inherit, journaled."""
    new.mthp_enabled(2048).write_text("always inherit madvise [never]")
    info = inspect_host(new)
    assert arm_thp_knobs(Arm("t", "thp"), info)[0][2048] == "inherit"
    assert arm_thp_knobs(Arm("c", "thp-collapse"), info)[0][2048] == "inherit"
    assert arm_thp_knobs(Arm("4k", "4k"), info)[0][2048] == "never"  # as found
    c = control(new, tmp_path)
    from hugelab.runner import apply_arm
    apply_arm(c, Arm("t", "thp", thp="always"), info, (info["thp"]["enabled"], info["thp"]["defrag"]))
    assert mode(new.mthp_enabled(2048)) == "inherit"
    c.restore()
    assert mode(new.mthp_enabled(2048)) == "never"


def test_runner_applies_an_arm_then_the_next_puts_the_knobs_back(new, tmp_path):
    from hugelab.runner import apply_arm

    c = control(new, tmp_path)
    info = inspect_host(new)
    initial = (info["thp"]["enabled"], info["thp"]["defrag"])
    apply_arm(c, Arm("m", "mthp-64K", thp="always"), info, initial)
    assert mode(new.mthp_enabled(64)) == "always" and mode(new.mthp_enabled(2048)) == "never"
    assert mode(new.thp_enabled) == "madvise"  # the arm's thp is the size's mode, not THP's
    apply_arm(c, Arm("s", "shmem-thp"), info, initial)
    assert mode(new.mthp_enabled(64)) == "never" and mode(new.mthp_enabled(2048)) == "inherit"
    assert mode(new.shmem_enabled) == "advise"
    apply_arm(c, Arm("4k", "4k"), info, initial)
    assert mode(new.shmem_enabled) == "never"
    c.restore()
    assert inspect_host(new)["mthp"] == info["mthp"]


def test_mthp_arm_sizes_the_kernel_does_not_offer_are_skipped(tmp_path):
    host = add_mthp(make_host(tmp_path / "r"), anon_kb=(64, 2048))
    exp = Experiment("e", (Arm("a", "mthp-64K"), Arm("b", "mthp-16K"),
                           Arm("c", "mthp-64K", thp="never")))
    skipped = unsupported_arms(exp, inspect_host(host))
    assert "a" not in skipped
    assert skipped["b"] == ("this kernel offers no 16 KiB multi-size THP for anonymous memory "
                            "(it offers 64 KiB, 2048 KiB)")
    assert "thp = 'never'" in skipped["c"]


# --- the backing vocabulary ----------------------------------------------------------------

def test_backing_vocabulary_is_one_source():
    from hugelab.experiment import backings, model
    from hugelab.workloads.hugelab_mem import workload as hugelab_mem

    assert model.BACKINGS is hugelab_mem.BACKINGS is backings.BACKINGS
    assert backings.mthp_size_kb("mthp-64K") == 64 and backings.mthp_size_kb("mthp-1M") == 1024
    assert backings.mthp_size_kb("thp") is None and backings.mthp_size_kb("mthp-3K") is None
    # any size of the kernel's form: which ones exist is the host's to say (unsupported_arms)
    assert backings.mthp_size_kb("mthp-8K") == 8 and backings.mthp_size_kb("mthp-4M") == 4096
    for bad in ("mthp-1024K", "mthp-0K", "mthp-4K", "mthp-48K", "mthp-64k", "mthp-064K"):
        assert backings.mthp_size_kb(bad) is None and backings.backing_error(bad), bad
    assert "2M is 'thp'" in str(backings.backing_error("mthp-2M"))
    assert "mthp-<size> (16K, 64K, 1M" in str(backings.backing_error("nope"))
    assert [a.backing for a in model.default_experiment().arms] == list(backings.CLASSIC)


def test_outside_programs_refuse_backings_they_cannot_request():
    from hugelab.errors import WorkloadError
    from hugelab.workloads.toolrun import check_backing

    check_backing("mthp-16K")
    with pytest.raises(WorkloadError, match="needs a workload that maps its own memory"):
        check_backing("thp-collapse")
    with pytest.raises(WorkloadError, match="unknown backing"):
        check_backing("hugetlb-4G")


def test_experiment_files_take_the_new_backings():
    import tomllib

    from hugelab.experiment.parse import parse_experiment

    text = (
        'name = "m"\n[workload]\nkind = "hugelab-mem"\n'
        '[[arms]]\nname = "a"\nbacking = "mthp-64K"\nthp = "always"\n'
        '[[arms]]\nname = "b"\nbacking = "thp-collapse"\n'
        '[[arms]]\nname = "c"\nbacking = "shmem-thp"\n')
    exp = parse_experiment(tomllib.loads(text), text)
    assert [a.mthp_kb for a in exp.arms] == [64, None, None]


def test_hugelab_mem_reports_the_collapse_apart():
    from pathlib import Path

    from hugelab.workloads.base import ExecResult
    from hugelab.workloads.hugelab_mem import HugelabMem

    ev = {"Size_kB": 65536, "Rss_kB": 65536, "AnonHugePages_kB": 65536, "KernelPageSize_kB": 4}
    doc = {"tool": "hugelab-mem", "backing": "thp-collapse", "setup_s": 0.3, "duration_s": 1.0,
           "metrics": {"ns_per_access": 80.0}, "primary": {"name": "ns_per_access"},
           "collapse": {"result": "EAGAIN", "errno": 11, "seconds": 0.25,
                        "before": {"AnonHugePages_kB": 0}}, "evidence": ev}
    w = HugelabMem()
    r = w.parse(ExecResult(["hugelab-mem"], 0, json.dumps(doc), "", 1.4, {}))
    assert r.metrics["collapse_s"] == 0.25 and r.value == 80.0
    assert r.info["collapse"] == {"result": "EAGAIN", "errno": 11, "seconds": 0.25}
    assert r.evidence["collapse"]["before"] == {"AnonHugePages_kB": 0}
    assert w.argv("mthp-64K", Path("hm"))[3:5] == ["--backing", "mthp-64K"]


DRY_RUN = """\
name = "mthp-dry"
blocks = 2

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.2

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "m64"
backing = "mthp-64K"
thp = "always"

[[arms]]
name = "shm"
backing = "shmem-thp"

[[arms]]
name = "m16"
backing = "mthp-16K"
"""


def dry_run(tmp_path, monkeypatch, capsys, host, *flags) -> str:
    """`hugelab run --dry-run` in this process, on the fake host `host`: its stdout."""
    from hugelab.cli.main import main
    from hugelab.planning import dryrun
    monkeypatch.setattr(dryrun, "inspect_host", lambda *_: inspect_host(host))
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "300")
    (tmp_path / "exp.toml").write_text(DRY_RUN)
    rc = main(["run", str(tmp_path / "exp.toml"), "--dry-run", "--store",
               str(tmp_path / "x.db"), *flags])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "state").exists()
    return out


def test_dry_run_shows_the_mthp_knobs_each_arm_sets(tmp_path, monkeypatch, capsys):
    host = add_mthp(make_host(tmp_path / "h"), anon_kb=(64, 2048))
    p = json.loads(dry_run(tmp_path, monkeypatch, capsys, host, "--json"))
    assert p["host_mthp"] == [
        {"knob": "enabled", "size": "64K", "mode": "never"},
        {"knob": "enabled", "size": "2M", "mode": "inherit"},
        {"knob": "shmem_enabled", "size": None, "mode": "never"},
        {"knob": "shmem_enabled", "size": "8K", "mode": "never"},
        {"knob": "shmem_enabled", "size": "64K", "mode": "never"},
        {"knob": "shmem_enabled", "size": "2M", "mode": "inherit"}]
    cells = {c["name"]: c for c in p["cells"]}
    knobs = {n: {(k["knob"], k["size"]): (k["mode"], k["unchanged"]) for k in c["mthp_knobs"]}
             for n, c in cells.items()}
    assert all(same for _, same in knobs["4k"].values()) and len(knobs["4k"]) == 6
    assert knobs["m64"][("enabled", "64K")] == ("always", False)
    assert knobs["m64"][("enabled", "2M")] == ("never", False)
    assert knobs["m64"][("shmem_enabled", "2M")] == ("inherit", True)
    assert knobs["shm"][("shmem_enabled", None)] == ("advise", False)
    assert knobs["shm"][("shmem_enabled", "8K")] == ("never", True)
    assert knobs["shm"][("enabled", "2M")] == ("inherit", True)
    assert cells["m16"]["skipped"] and cells["m16"]["mthp_knobs"] == []  # 16K: not offered
    assert cells["m64"]["host_thp"] == "(unchanged)"  # its thp is the 64K size's mode
    assert p["host_changes"]["thp_modes"] == [{"enabled": "madvise", "defrag": "madvise"}]

    text = " ".join(dry_run(tmp_path, monkeypatch, capsys, host).split())
    assert "host mTHP (per-size THP modes each arm's trials run under" in text
    assert ("m64: enabled: 64K always, 2M never; shmem_enabled: as the host has it "
            "(unchanged)") in text
    assert ("shm: enabled: as the host has it (unchanged); shmem_enabled: top-level advise, "
            "8K 64K never (unchanged), 2M inherit (unchanged)") in text
    assert "4k: every knob as the host has it (unchanged)" in text and "m16:" not in text


def test_dry_run_without_mthp_has_no_section(tmp_path, monkeypatch, capsys):
    host = make_host(tmp_path / "h")
    p = json.loads(dry_run(tmp_path, monkeypatch, capsys, host, "--json"))
    assert p["host_mthp"] == [] and all(c["mthp_knobs"] == [] for c in p["cells"])
    assert "host mTHP" not in dry_run(tmp_path, monkeypatch, capsys, host)
