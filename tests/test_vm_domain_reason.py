"""A failed program in a user's domain keeps its reason: a program ended by a signal, or by
the guest's OOM killer, said nothing itself, and the trial's reason read only 'java exited
with -9: (no output)'. The ways in (qemu-guest-agent, SSH) add the guest's own account
(vm/domains/remote.py `explain`); here through the agent's exec, driven by a stand-in for
qemu-guest-agent's JSON answers (no guest needed)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from hugelab.errors import WorkloadError
from hugelab.vm.domains.qga import QgaTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.toolrun import check_exit

VMSTAT = "nr_free_pages 1000\noom_kill {n}\npgfault 5\n"


class Agent:
    """qemu-guest-agent as libvirt hands back its answers: guest-exec, then guest-exec-status
    reporting `status`; /proc/vmstat with `oom` kills."""

    def __init__(self, status: dict[str, Any], oom: int) -> None:
        self.status, self.oom, self.calls = status, oom, []  # type: ignore[var-annotated]

    def call(self, command: str, arguments: dict[str, Any] | None = None,
             timeout_s: float = 30.0) -> Any:
        self.calls.append(command)
        if command == "guest-exec":
            return {"pid": 4242}
        if command == "guest-exec-status":
            return {"exited": True, **self.status}
        raise AssertionError(command)

    def read(self, path: str) -> str | None:
        return VMSTAT.format(n=self.oom) if path == "/proc/vmstat" else None


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def run(status: dict[str, Any], oom: int) -> ExecResult:
    return QgaTarget(Agent(status, oom), "vm0").exec(["java", "-jar", "/tmp/w.jar"])  # type: ignore[arg-type]


def test_a_program_the_guests_oom_killer_ended_says_so():
    res = run({"signal": 9}, oom=1)
    assert res.returncode == -9 and res.stderr.splitlines() == [
        "[hugelab: ended by signal 9 in guest vm0]",
        "[hugelab: the guest's OOM killer has ended 1 process(es) since it booted (oom_kill in "
        "its /proc/vmstat): the guest ran out of memory]"]
    with pytest.raises(WorkloadError) as exc:
        check_exit(res, "java")
    first = exc.value.message.splitlines()[0]  # the trial's one-line reason
    assert first == "java exited with -9: [hugelab: ended by signal 9 in guest vm0]"
    assert "OOM killer has ended 1 process(es)" in exc.value.message


def test_the_programs_own_words_come_first_and_a_plain_failure_is_left_as_it_is():
    res = run({"exitcode": 1, "err-data": b64("Error: Unable to access jarfile /tmp/w.jar\n")},
              oom=2)
    assert res.stderr.splitlines()[0] == "Error: Unable to access jarfile /tmp/w.jar"
    assert "OOM killer has ended 2" in res.stderr
    plain = run({"exitcode": 1, "err-data": b64("Error: no such class\n")}, oom=0)
    assert plain.stderr == "Error: no such class\n"
    ok = run({"exitcode": 0, "out-data": b64("steps/s: 5\n")}, oom=3)
    assert ok.returncode == 0 and ok.stderr == "" and ok.stdout == "steps/s: 5\n"
