"""`hugelab vm qemu-args`: the argv users copy to start guests themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EXP = """\
[workload]
kind = "hugelab-mem"
size = "64M"

[[arms]]
name = "native"
backing = "4k"

[[arms]]
name = "g1g"
backing = "hugetlb-2M"
[arms.vm]
backing = "memfd"
page_size = "1G"
prealloc = true
mem = "2G"
[arms.guest]
thp = "never"
"""


def run(*args):
    return subprocess.run([sys.executable, "-m", "hugelab.cli", "vm", "qemu-args", *args],
                          capture_output=True, text=True)


@pytest.mark.slow
def test_memfd_1g_arm(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text(EXP)
    r = run("g1g", str(f), "--json", "--accel", "tcg")
    assert r.returncode == 0, r.stderr
    argv = json.loads(r.stdout)["argv"]
    backend = argv[argv.index("-object") + 1]
    assert backend.startswith("memory-backend-memfd,id=mem0,size=2048M")
    assert "hugetlb=on" in backend and "hugetlbsize=1G" in backend and "prealloc=on" in backend
    assert argv[argv.index("-accel") + 1] == "tcg"
    append = argv[argv.index("-append") + 1]
    assert "transparent_hugepage=never" in append and "hugepages=32" in append  # 64M / 2M


@pytest.mark.slow
def test_native_arm_and_unknown_arm_are_clear_errors(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text(EXP)
    r = run("native", str(f))
    assert r.returncode == 2 and "runs natively" in r.stderr
    r = run("nope", str(f))
    assert r.returncode == 2 and "arms: native, g1g" in r.stderr


@pytest.mark.parametrize("command", ["qemu-args", "libvirt-xml"])
def test_an_arm_in_the_users_domain_points_at_vm_diff(command, capsys):
    """A domain arm has no guest of hugelab's to print: said so, with the command that shows
    what the arm changes (it read 'guest memory 0 MiB is too small' before)."""
    from tests.helpers import cli
    exp = str(ROOT / "examples" / "postgres-domain-2x2.toml")
    rc, out, err = cli(["vm", command, "host=2M,huge_pages=on", exp], capsys)
    assert rc == 2 and out == "", out
    assert "runs in your libvirt domain 'hugelab-demo-debian'" in err, err
    assert f"hugelab vm diff host=2M,huge_pages=on {exp}" in err and "0 MiB" not in err
