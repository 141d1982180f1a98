"""Users' own VMs, for real: a libvirt domain of a small Debian image (hugelab.vm.domains.image, cached
by recipe) runs hugelab-mem in memfd 2 MiB guest RAM over SSH and PostgreSQL through its guest
agent; the domain's definition and disk are byte-identical afterwards; a SIGKILL during a trial
then `hugelab recover` leaves no transient domain, overlay, QEMU or pool."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import HUGELAB
from tests.hostguard import host_state
from tests.vmhelpers import DOMAIN, PREFIX, libvirt_missing, transient, virsh

pytestmark = [pytest.mark.host, pytest.mark.vm, pytest.mark.slow]

EXPERIMENT = """\
name = "own-vm-{kind}"
seed = 4
blocks = 1

[vm]
domain = "{domain}"
{access}
[workload]
{workload}

[[arms]]
name = "anon"
backing = "4k"
[arms.vm]
backing = "anon"

[[arms]]
name = "memfd-2M"
backing = "4k"
[arms.vm]
backing = "memfd"
page_size = "2M"
"""
WORKLOADS = {
    "sysbench": 'kind = "sysbench"\nblock_size = "1M"\ntotal_size = "64M"\ntime_s = 2',
    "hugelab-mem": 'kind = "hugelab-mem"\nworkload = "chase"\nsize = "64M"\nduration = 1.0',
}
# the same workloads over SSH, for guests without the agent (the image's sshd takes
# hugelab's demo key, named on the domain's kernel command line)
KEY: list[Path] = []
ACCESS = {"agent": 'access = "agent"\n', "ssh": 'access = "ssh"\nssh_key = "{key}"\n'}


@pytest.fixture(scope="module")
def domain():
    reason = libvirt_missing()
    if reason:
        pytest.fail(reason)  # a real component this feature needs: never a silent skip
    from hugelab.vm.domains.demo_domain import define_image_domain, demo_key
    t0 = time.monotonic()
    home = define_image_domain(DOMAIN)
    KEY[:] = [demo_key()]  # the key the domain lets in (the tests then move the state dir)
    print(f"image and domain ready in {time.monotonic() - t0:.1f} s")
    return DOMAIN, home


def fingerprint(name: str, home: Path) -> tuple[str, str]:
    xml = virsh("dumpxml", "--inactive", name).stdout
    disk = hashlib.sha256((home / "disk.qcow2").read_bytes()).hexdigest()
    return hashlib.sha256(xml.encode()).hexdigest(), disk


def overlays() -> list[Path]:
    from hugelab.vm.common.libvirtd import OVERLAY_ROOT
    return [p for p in OVERLAY_ROOT.glob(f"{PREFIX}*")] if OVERLAY_ROOT.exists() else []


def write(tmp: Path, kind: str, workload: str, access: str = "agent") -> Path:
    path = tmp / f"{kind}.toml"
    path.write_text(EXPERIMENT.format(kind=kind, domain=DOMAIN, workload=workload,
                                      access=ACCESS[access].format(key=KEY[0])))
    return path


ANON_ARM = '[[arms]]\nname = "anon"\nbacking = "4k"\n[arms.vm]\nbacking = "anon"\n\n'


# the agent way in with two arms (sysbench) is examples/005-own-vm-duet.toml, and two arms over
# SSH examples/memcached-domain.toml, both run by tests/test_examples_run.py: here hugelab's own
# program copied in over SSH, on the arm vm diff shows
@pytest.mark.parametrize(("kind", "access"), [("hugelab-mem", "ssh")])
def test_an_arm_in_the_users_domain(domain, kind, access, tmp_path, monkeypatch):
    name, home = domain
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before, mark = host_state(), fingerprint(name, home)
    exp = write(tmp_path, kind, WORKLOADS[kind], access)
    assert ANON_ARM in exp.read_text()
    exp.write_text(exp.read_text().replace(ANON_ARM, ""))
    diff = subprocess.run([*HUGELAB, "vm", "diff", "memfd-2M", str(exp)], capture_output=True,
                          text=True)
    assert diff.returncode == 0 and '<source type="memfd" />' in diff.stdout, diff.stderr
    t0 = time.monotonic()
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", "s.db"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=900)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    shown = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", "s.db", "--json"],
                                      capture_output=True, text=True, cwd=tmp_path,
                                      check=True).stdout)
    for t in shown["trials"]:
        where = f"{t['arm']}: {t['error']}"
        assert t["status"] == "ok", where
        ev = t["evidence"]
        assert ev["checks"]["vm"]["status"] == "verified", ev["checks"]
        assert ev["checks"]["workload"]["status"] in ("verified", "not applicable"), ev["checks"]
        assert ev["qemu"]["domain"]["of"] == name
        assert ev["qemu"]["domain"]["access"] == access
        if access == "ssh":  # the demo image's own host key, from its build, pinned
            assert ev["qemu"]["domain"]["host_key"] == "pinned"
        assert ev["tree"]["where"].startswith("guest") and ev["tree"].get("samples"), ev["tree"]
        want = 2048 if t["arm"] == "memfd-2M" else 4
        assert ev["qemu"]["kernel_page_size_kb"] == want, ev["qemu"]
        assert t["provenance"]["boot_s"] > 0
        assert t["monitors"]["guest_meminfo"]["MemTotal"] > 0  # the guest's own view
    assert [t["arm"] for t in shown["trials"]] == ["memfd-2M"]
    boots = [t["provenance"]["boot_s"] for t in shown["trials"]]
    print(f"{kind} through {access}: 1 trial in {took:.0f} s, boot-to-{access} "
          f"{min(boots):.0f}-{max(boots):.0f} s")
    assert transient() == [] and overlays() == []
    assert host_state() == before
    assert fingerprint(name, home) == mark  # the user's definition and disk, byte for byte


def guest_has(dom: str, path: str) -> bool:
    """Whether the guest of transient domain `dom` has `path` (through its agent, beside the
    run's own use of it: libvirt takes turns)."""
    r = subprocess.run(["virsh", "qemu-agent-command", dom, json.dumps(
        {"execute": "guest-file-open", "arguments": {"path": path}})], capture_output=True,
        text=True)
    if r.returncode != 0:
        return False
    handle = json.loads(r.stdout)["return"]
    subprocess.run(["virsh", "qemu-agent-command", dom, json.dumps(
        {"execute": "guest-file-close", "arguments": {"handle": handle}})], capture_output=True)
    return True


def test_sigkill_during_a_guest_server_trial_then_recover_and_resume(domain, tmp_path):
    """PostgreSQL in the domain, from a user's pg_dump with their postgresql.conf and pgbench
    script: killed while the guest's postmaster runs; `hugelab recover` leaves no transient
    domain, overlay or record; the resumed run completes the trial once, the dump untouched."""
    name, home = domain
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    before, mark = host_state(), fingerprint(name, home)
    data = Path(__file__).resolve().parents[1] / "examples" / "data"
    dump_sum = hashlib.sha256((data / "shop.sql").read_bytes()).hexdigest()
    exp = tmp_path / "pg.toml"  # 3 s of load: enough for the evidence (postgres-domain-2x2's)
    exp.write_text(EXPERIMENT.format(kind="pg", domain=DOMAIN, access="", workload=(
        f'kind = "postgres"\ndump = "{data}/shop.sql"\nconf = "{data}/shop.conf"\n'
        f'script = "{data}/shop-orders.sql"\nclients = 1\nthreads = 1\nduration_s = 3\n'
        'warmup_s = 1')).split("[[arms]]\n", 1)[0] + PG_ARM)
    log = tmp_path / "run.log"  # what the run said, should it end before the kill
    # first killed while the domain's layer is built (its copy booting): recover removes the
    # copy, its record and the half-built layer
    from hugelab.vm.domains.layer import LAYER_ROOT, MANIFEST
    for made in LAYER_ROOT.glob(f"*/{MANIFEST}"):  # this domain's layers: built again here
        if json.loads(made.read_text())["domain"] == name:
            shutil.rmtree(made.parent)
    with open(log, "w") as out:
        proc = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", "s.db"], cwd=tmp_path,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    try:
        while not any("-layer-" in d for d in transient()):
            assert proc.poll() is None, f"the run ended before its layer: {log.read_text()}"
            assert time.monotonic() < deadline, "no copy of the domain built its layer"
            time.sleep(0.2)
        assert list(LAYER_ROOT.glob("*.tmp"))  # the layer, half built
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    r = subprocess.run([*HUGELAB, "recover"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert transient() == [] and not list(LAYER_ROOT.glob("*.tmp")), r.stdout
    assert not list((tmp_path / "state" / "domains").glob("*.json"))
    # then killed while a trial's postmaster runs in its copy, over the layer built first
    with open(log, "w") as out:
        proc = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", "s.db"], cwd=tmp_path,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 420

    def trials() -> list[str]:
        return [d for d in transient() if "-layer-" not in d]

    try:  # until the guest's postmaster is up (its pid file, read through the agent)
        while not (trials() and guest_has(trials()[0], "/var/tmp/hugelab/data/postmaster.pid")):
            assert proc.poll() is None, \
                f"the run ended before the guest's server started: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the guest's server did not start"
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the copy belongs to libvirtd, which ends it when the killed run's connection drops
    # (autodestroy); its overlays and record stay until recover
    deadline = time.monotonic() + 30
    while transient() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert overlays(), "the killed run's overlays are still there for recover to remove"
    r = subprocess.run([*HUGELAB, "recover"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert transient() == [] and overlays() == []
    assert not list((tmp_path / "state" / "domains").glob("*.json"))
    assert host_state() == before
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", "s.db"], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    trials = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", "s.db", "--json"],
                                       capture_output=True, text=True, cwd=tmp_path, env=env,
                                       check=True).stdout)["trials"]
    assert [(t["block"], t["arm"], t["status"]) for t in trials] == [(0, "hp-on", "ok")]
    assert trials[0]["evidence"]["checks"]["workload"]["status"] == "verified"
    info = trials[0]["provenance"]
    assert "postgres stopped" in info["guest_changes_undone"]
    assert info["dump"] == f"{data}/shop.sql" and info["builtin"] == f"{data}/shop-orders.sql"
    assert info["data"] == "the domain's layer"  # restored once, in the layer's copy
    assert info["layer"]["what"] == "PostgreSQL's cluster restored from shop.sql"
    assert Path(info["layer"]["path"]).parent == LAYER_ROOT
    assert info["settings"]["work_mem"] == "8MB"  # the user's conf, under the arm's app
    assert info["settings"]["shared_buffers"] == "32MB" and info["settings"]["huge_pages"] == "on"
    assert any("huge_pages" in w for w in info["warnings"]), info["warnings"]
    assert hashlib.sha256((data / "shop.sql").read_bytes()).hexdigest() == dump_sum
    assert transient() == [] and overlays() == [] and host_state() == before
    assert fingerprint(name, home) == mark


PG_ARM = """[[arms]]
name = "hp-on"
backing = "hugetlb-2M"
app = { shared_buffers = "32MB" }
[arms.vm]
backing = "anon"
"""


def test_errors_a_user_can_act_on(domain, tmp_path):
    """No such domain; a running domain with writable disks (refused before any change)."""
    name, home = domain
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    before = host_state()
    missing = tmp_path / "missing.toml"
    missing.write_text(EXPERIMENT.format(kind="x", domain="no-such-domain", access="",
                                         workload=WORKLOADS["sysbench"]))
    r = subprocess.run([*HUGELAB, "run", str(missing), "--store", "s.db"], capture_output=True,
                       text=True, cwd=tmp_path, env=env)
    assert r.returncode != 0 and "no libvirt domain named 'no-such-domain'" in r.stderr, r.stderr
    assert DOMAIN in r.stderr and "Traceback" not in r.stderr  # the hint lists the domains
    virsh("start", name)
    try:
        exp = write(tmp_path, "running", WORKLOADS["sysbench"])
        r = subprocess.run([*HUGELAB, "run", str(exp), "--store", "s.db"], capture_output=True,
                           text=True, cwd=tmp_path, env=env)
    finally:
        virsh("destroy", name, check=False)
    assert r.returncode != 0 and "is running" in r.stderr and "vda" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and transient() == [] and host_state() == before
