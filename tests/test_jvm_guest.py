"""A JVM inside hugelab's own guests: the guest sees the host's root, so the same java runs
there on the user's jar; UseLargePages gets a guest pool sized by the JVM's own need (heap,
code cache, marking bitmaps), and the evidence is the JVM's report and the guest's tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.hostguard import host_state

WALK = """\
public class Walk {
    public static void main(String[] a) {
        int n = 8 << 20;
        int[] next = new int[n];
        java.util.Random r = new java.util.Random(1);
        for (int i = 0; i < n; i++) next[i] = r.nextInt(n);
        long ms = Long.parseLong(a[0]), steps = 0;
        int p = 0;
        long end = System.nanoTime() + ms * 1000000L;
        while (System.nanoTime() < end) {
            for (int k = 0; k < 100000; k++) p = next[p];
            steps += 100000;
        }
        System.out.println("steps/s: " + (steps * 1000.0 / ms) + " at " + p);
    }
}
"""

WORKLOAD = """\
[workload]
kind = "jvm"
jar = "{jar}"
args = ["1000"]
regex = 'steps/s: ([0-9.E]+)'
name = "steps_per_s"
unit = "steps/s"
heap = "96M"
gc = "Parallel"
"""
EXP = """\
name = "jvm-guest"
seed = 4
blocks = 1
baseline = "4k"
[vm]
mem = "1G"
vcpus = 1
accel = "auto"
{workload}[[arms]]
name = "4k"
backing = "4k"
[arms.vm]
backing = "anon"
[arms.guest]
thp = "never"
[[arms]]
name = "large"
backing = "hugetlb-2M"
app = {{ UseLargePages = true }}
[arms.vm]
backing = "anon"
"""


def run_and_show(exp, tmp_path) -> list[dict]:
    """`hugelab run EXP` with a state directory of its own, then its trials as `show --json`."""
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    r = subprocess.run([sys.executable, "-m", "hugelab.cli", "run", str(exp), "--store",
                        str(tmp_path / "s.db")], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = subprocess.run([sys.executable, "-m", "hugelab.cli", "show", "1", "--store",
                            str(tmp_path / "s.db"), "--json"], capture_output=True, text=True)
    return list(json.loads(shown.stdout)["trials"])


def walk_jar(tmp_path) -> str:
    if shutil.which("javac") is None or shutil.which("jar") is None:
        pytest.fail("javac is not installed: ./bootstrap setup installs openjdk-17-jdk-headless")
    (tmp_path / "Walk.java").write_text(WALK)
    subprocess.run(["javac", "Walk.java"], cwd=tmp_path, check=True)
    (tmp_path / "m.txt").write_text("Main-Class: Walk\n")
    subprocess.run(["jar", "cfm", "walk.jar", "m.txt", "Walk.class"], cwd=tmp_path, check=True)
    return str(tmp_path / "walk.jar")


@pytest.mark.vm
@pytest.mark.host
@pytest.mark.slow
def test_4k_and_large_pages_in_a_guest_each_verified(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(EXP.format(workload=WORKLOAD.format(jar=walk_jar(tmp_path))))
    before = host_state()
    trials = {t["arm"]: t for t in run_and_show(exp, tmp_path)}
    for arm, says in (("4k", "heap in 4K pages"), ("large", "heap in 2M pages")):
        t = trials[arm]
        assert t["status"] == "ok" and t["evidence"]["check"] == "verified", \
            t["error"] or t["evidence"]  # a failed trial's reason is its error
        assert says in t["evidence"]["reason"] and t["value"] > 0, t["evidence"]
    assert "in 2M hugetlb pages" in trials["large"]["evidence"]["reason"]  # the guest's pool
    assert host_state() == before


DOMAIN_EXP = """\
name = "jvm-domain"
seed = 4
blocks = 1
[vm]
domain = "{domain}"
mem = "1G"
{workload}[[arms]]
name = "large"
backing = "hugetlb-2M"
app = {{ UseLargePages = true }}
[arms.vm]
backing = "memfd"
page_size = "2M"
"""


@pytest.mark.vm
@pytest.mark.host
@pytest.mark.server
@pytest.mark.slow
def test_large_pages_in_a_users_domain_from_the_guests_own_java(tmp_path):
    """The guest's own java in a copy of the demo domain, the user's jar copied in: the guest
    pool sized by the JVM's need, the JVM's own report and the guest's tree verified, QEMU's
    guest RAM in 2 MiB pages on the host."""
    from hugelab.vm.domains.demo_domain import define_image_domain
    from tests.vmhelpers import DOMAIN, libvirt_missing, transient
    assert libvirt_missing() is None
    define_image_domain(DOMAIN)
    exp = tmp_path / "exp.toml"
    exp.write_text(DOMAIN_EXP.format(domain=DOMAIN,
                                     workload=WORKLOAD.format(jar=walk_jar(tmp_path))))
    before = host_state()
    (t,) = run_and_show(exp, tmp_path)
    ev = t["evidence"]
    assert t["status"] == "ok" and ev["check"] == "verified", t["error"] or ev
    assert ev["checks"]["app"]["status"] == "verified" and "2M" in ev["checks"]["app"]["reason"]
    assert ev["checks"]["vm"]["status"] == "verified" and ev["qemu"]["kernel_page_size_kb"] == 2048
    assert ev["qemu"]["domain"]["of"] == DOMAIN and ev["tree"]["where"].startswith("guest")
    assert t["monitors"]["guest_meminfo"]["HugePages_Total"] > 0  # the pool the JVM needed
    assert transient() == [] and host_state() == before
