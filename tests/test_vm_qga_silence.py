"""A guest agent that stays silent for a while does not end the trial: libvirt gives up on
an agent that has not answered its `guest-sync` within 5 s ("Guest agent is not responding:
Guest agent not available for now", VIR_ERR_AGENT_UNRESPONSIVE), which a guest whose vCPUs a
workload saturates can cause (a suite's redis-domain trial lost its agent so once). For real:
a copy of the demo domain whose qemu-guest-agent a program it started stops (SIGSTOP) for
12 s; hugelab asks `guest-exec-status` while it is stopped."""

from __future__ import annotations

import time

import pytest

from hugelab.vm.common.libvirtd import DomainError
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.domains.libvirt_guest import DomainGuest
from hugelab.vm.domains.qga import Agent, QgaTarget
from tests.vmhelpers import libvirt_missing

# the background lane (conftest): a domain of its own, so that its copy is none of the
# transient copies, overlays or redefinitions of tests.vmhelpers.DOMAIN that the machine lane's
# domain tests check, and nothing it asserts reads the host
pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.beside]
DOMAIN = "hugelab-silence-debian"

# stops the guest's qemu-ga (by comm; the shell's builtins only, so it is quick under TCG)
# for 12 s, then lets it go; its output goes nowhere, so the agent reports it exited only then
FREEZE = ("(for p in /proc/[0-9]*; do read c < $p/comm && [ \"$c\" = qemu-ga ] && "
          "kill -STOP ${p#/proc/} && echo ${p#/proc/} > /run/frozen; done; sleep 12; "
          "kill -CONT $(cat /run/frozen)) >/dev/null 2>&1")


def freeze(agent: Agent) -> tuple[int, float]:
    """Start the freezer and wait until libvirt finds the agent silent (a 3 s guest-info,
    which is not asked again at that timeout's end); its pid and when the silence began."""
    pid = int(agent.call("guest-exec", {"path": "/bin/sh", "arg": ["-c", FREEZE]})["pid"])
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        try:
            agent.call("guest-info", timeout_s=3, reask_s=0)
        except DomainError as exc:
            assert "not responding" in exc.message, exc.message
            return pid, time.monotonic() - 3
        time.sleep(0.2)
    raise AssertionError("the agent never went silent: the freezer did not stop it")


def test_a_silent_agent_is_asked_again_and_answers_once_back(tmp_path, monkeypatch):
    reason = libvirt_missing()
    if reason:
        pytest.fail(reason)  # a real component this test needs: never a silent skip
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    from hugelab.vm.domains.demo_domain import define_image_domain
    define_image_domain(DOMAIN)
    with DomainGuest(VmSpec(mem_mib=512, vcpus=1), domain=DOMAIN, uri="qemu:///system",
                     name="silent") as guest:
        target = guest.target
        assert isinstance(target, QgaTarget)
        agent = target.agent
        pid, silent_since = freeze(agent)
        status = agent.call("guest-exec-status", {"pid": pid})  # asked until it answers
        while not status.get("exited"):
            status = agent.call("guest-exec-status", {"pid": pid})
            time.sleep(0.2)
        assert status.get("exitcode") == 0, status
        assert agent.reasked >= 1 and time.monotonic() - silent_since >= 8, agent.reasked
        # silent past the limit: an error that says how long it was asked
        pid, _ = freeze(agent)
        with pytest.raises(DomainError, match=r"guest-exec-status: .*not responding.* \(silent "):
            agent.call("guest-exec-status", {"pid": pid}, reask_s=4)


class Limits:
    """AGENT_WAIT_S as the copy reads it (.get(accel, default)): `first` seconds for the first
    boot, then `then` for every later one."""

    def __init__(self, first: float, then: float) -> None:
        self.asked = 0
        self.first, self.then = first, then

    def get(self, accel: str, default: float) -> float:
        self.asked += 1
        return self.first if self.asked == 1 else self.then


def test_a_boot_that_does_not_answer_is_booted_once_more(tmp_path, monkeypatch):
    """A first boot that no way in answers (here: given 1 s, where a boot takes 10 s or more
    under TCG; a suite's redis-domain copy once hung so for 300 s) is destroyed and the copy
    boots once more on fresh overlays; that boot answers and runs work. Given 1 s twice, the
    error says so and nothing of either boot is left."""
    reason = libvirt_missing()
    if reason:
        pytest.fail(reason)
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    from hugelab.vm.common.libvirtd import connect, records_dir
    from hugelab.vm.domains import libvirt_guest
    from hugelab.vm.domains.demo_domain import define_image_domain
    define_image_domain(DOMAIN)
    spec = VmSpec(mem_mib=512, vcpus=1)
    monkeypatch.setattr(libvirt_guest, "AGENT_WAIT_S", Limits(1.0, 300.0))
    with DomainGuest(spec, domain=DOMAIN, uri="qemu:///system", name="twice") as guest:
        assert guest.boot_retried is not None and "did not answer within 1s" in \
            guest.boot_retried, guest.boot_retried
        assert guest.target.exec(["echo", "booted"], timeout=60).stdout.strip() == "booted"
        assert sorted(p.name for p in guest.overlays.iterdir() if p.suffix == ".qcow2")
        dom_name, overlays = guest.dom_name, guest.overlays
    monkeypatch.setattr(libvirt_guest, "AGENT_WAIT_S", Limits(1.0, 1.0))
    with pytest.raises(libvirt_guest.SilentGuest, match=r"did not answer within 1s .*booted twice"):
        with DomainGuest(spec, domain=DOMAIN, uri="qemu:///system", name="twice"):
            pass
    conn = connect("qemu:///system")
    try:
        assert dom_name not in conn.listDomainsID() and dom_name not in \
            [d.name() for d in conn.listAllDomains()]
    finally:
        conn.close()
    assert not overlays.exists() and not list(records_dir().glob("*.json"))
