"""A domain's prepared layer (hugelab.vm.domains.layer): its cache key follows the domain's
disks and the kind's build, and a layer over disks that have changed since is removed when a new
one is made, while other domains' layers and the one in use stay. The layer's build and use in a
real domain: tests/test_vm_user_domain.py (killed mid-build, then used) and the
postgres-domain-2x2 example (tests/test_examples_run.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab import owned
from hugelab.vm.domains.layer import MANIFEST, _drop_stale, disk_stats, layer_key


def test_the_key_follows_the_disks_and_the_build():
    disks = [("/img/a.qcow2", 100, 7)]
    key = layer_key("d", "qemu:///system", disks, '{"scale": 1}')
    assert key == layer_key("d", "qemu:///system", list(disks), '{"scale": 1}')
    for other in (layer_key("d", "qemu:///system", [("/img/a.qcow2", 100, 8)], '{"scale": 1}'),
                  layer_key("d", "qemu:///system", [("/img/a.qcow2", 101, 7)], '{"scale": 1}'),
                  layer_key("d", "qemu:///system", disks, '{"scale": 2}'),
                  layer_key("e", "qemu:///system", disks, '{"scale": 1}'),
                  layer_key("d", "qemu:///session", disks, '{"scale": 1}')):
        assert other != key


def _layer(root: Path, key: str, domain: str, disk: Path, mtime_ns: int) -> Path:
    (root / key).mkdir(parents=True)
    st = disk.stat()
    (root / key / MANIFEST).write_text(json.dumps({
        "domain": domain, "uri": "qemu:///system",
        "sources": [[str(disk), st.st_size, mtime_ns]]}))
    return root / key


def test_layers_over_changed_disks_go_when_a_new_one_is_made(tmp_path):
    disk = tmp_path / "disk.qcow2"
    disk.write_bytes(b"x" * 10)
    now = disk.stat().st_mtime_ns
    root = tmp_path / "layers"
    new = _layer(root, "new", "d", disk, now)
    same = _layer(root, "same", "d", disk, now)  # another build over the disk as it is
    stale = _layer(root, "stale", "d", disk, now - 1)  # the disk was written since
    other = _layer(root, "other", "e", disk, now - 1)  # another domain's: not this run's to judge
    _drop_stale(owned.TemplateCache(root), "d", "qemu:///system", keep="new")
    assert new.is_dir() and same.is_dir() and other.is_dir() and not stale.exists()
    os.utime(disk, ns=(now + 10**9, now + 10**9))  # written again: the kept one is stale too
    _drop_stale(owned.TemplateCache(root), "d", "qemu:///system", keep="new")
    assert new.is_dir() and not same.exists()


HOLDER = """import sys
from pathlib import Path
from hugelab import owned
owned.TemplateCache(Path(sys.argv[1])).ensure(sys.argv[2], lambda tmp: tmp.mkdir(), hold=True)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_stale_layer_a_live_run_boots_over_stays_until_that_run_ends(tmp_path):
    disk = tmp_path / "disk.qcow2"
    disk.write_bytes(b"x" * 10)
    now = disk.stat().st_mtime_ns
    root = tmp_path / "layers"
    stale = _layer(root, "stale", "d", disk, now - 1)
    run = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), "stale"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline() == "held\n"
        _drop_stale(owned.TemplateCache(root), "d", "qemu:///system", keep="new")
        assert stale.is_dir()  # its trials' copies still boot over it
    finally:
        run.communicate("", timeout=30)
    assert run.returncode == 0
    _drop_stale(owned.TemplateCache(root), "d", "qemu:///system", keep="new")
    assert not stale.exists()


def test_a_disk_that_is_not_a_regular_file_gets_no_layer(tmp_path):
    """A block device's or a network disk's writes show in no mtime: such a domain's trials
    build their own data (no layer), rather than boot over one that may be stale."""
    disk = tmp_path / "disk.qcow2"
    disk.write_bytes(b"x" * 10)
    assert disk_stats([str(disk)]) == [(str(disk), 10, disk.stat().st_mtime_ns)]
    assert disk_stats([str(disk), "/dev/null"]) is None  # a device
    assert disk_stats([str(disk), str(tmp_path / "gone")]) is None  # not a path here


def test_a_layer_that_cannot_be_built_fails_the_trial_saying_so_with_its_cause(monkeypatch):
    """A guest without the kind's server: the layer's build fails before any trial's copy
    boots, and the trial says that the layer was not built, with the build's own error, hint
    and cause (not "guest boot failed")."""
    from hugelab.errors import ToolMissingError
    from hugelab.experiment import Arm, VmLayer
    from hugelab.vm import trial
    from hugelab.vm.common.spec import VmSpec
    from hugelab.vm.domains import layer
    from hugelab.workloads.postgres.workload import Postgres

    def missing(*_a, **_k):
        raise ToolMissingError("/usr/lib/postgresql/<version>/bin/postgres",
                               "postgresql (in the guest layer, with its package manager)")

    monkeypatch.setattr(layer, "ensure", missing)
    monkeypatch.setattr(trial, "_guest", lambda *a, **k: pytest.fail("a trial's copy booted"))
    arm = Arm("on", "hugetlb-2M", vm=VmLayer(domain="users-vm"))
    [out] = trial.run_guest_trial(arm, Postgres(), VmSpec())
    assert out.result is None and out.error.startswith("the domain's layer was not built: ")
    assert "postgres' is not installed" in out.error and "apt-get install postgresql" in out.error
    assert out.cause == ToolMissingError.cause
