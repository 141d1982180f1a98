"""The Target protocol in a user's guest through qemu-guest-agent, with libvirt's agent API
(libvirt-python): `guest-exec` / `guest-exec-status` / `guest-file-*`. While a workload runs it
samples the workload's process tree in the guest (smaps_rollup of the exec'd pid and its
descendants, read with guest-file-read), so the evidence rules are the same as for hugelab's
own guests. A program missing in the guest is an error naming its package."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

from hugelab.errors import ToolMissingError, VMError
from hugelab.proc import package_of
from hugelab.vm.common.libvirtd import DomainError, libvirt_module
from hugelab.vm.domains.remote import RemoteTarget
from hugelab.workloads.base import ExecResult

COPY_CHUNK = 48 << 10  # qemu-ga reads requests in small buffers: keep each write small


# Commands asked again when the agent did not answer in time: libvirt sends `guest-sync`
# before every command and gives up after 5 s with "Guest agent is not responding: Guest
# agent not available for now" (VIR_ERR_AGENT_UNRESPONSIVE), the command itself unsent. A
# guest whose vCPUs a workload saturates (TCG, or a loaded host) can leave its agent
# unscheduled that long. Only commands that change nothing in the guest are asked again:
# a guest-exec whose own reply was lost could otherwise run twice.
# (`guest-ping` is not: the boot's wait asks it every second until its own limit)
REASKED = frozenset({"guest-exec-status", "guest-info"})
REASK_S = 60.0  # how long an agent may stay silent before the run gives up on it


class Agent:
    """qemu-guest-agent commands through libvirt (libvirt_qemu.qemuAgentCommand)."""

    def __init__(self, dom: Any) -> None:
        self.dom = dom
        self.lock = threading.Lock()
        self.reasked = 0  # commands asked again after a silence

    def call(self, command: str, arguments: dict[str, Any] | None = None,
             timeout_s: float = 30.0, reask_s: float = REASK_S) -> Any:
        """`command`'s return; asked again while the agent is silent, for `reask_s`, when it
        changes nothing in the guest (REASKED)."""
        import libvirt_qemu
        lv = libvirt_module()
        msg = json.dumps({"execute": command, **({"arguments": arguments} if arguments else {})})
        t0 = time.monotonic()
        while True:
            try:
                with self.lock:
                    out = libvirt_qemu.qemuAgentCommand(self.dom, msg, max(1, int(timeout_s)), 0)
                return json.loads(out).get("return")
            except lv.libvirtError as exc:
                silent = exc.get_error_code() == lv.VIR_ERR_AGENT_UNRESPONSIVE
                if silent and command in REASKED and time.monotonic() - t0 < reask_s:
                    self.reasked += 1
                    time.sleep(0.5)
                    continue
                waited = (f" (silent for {time.monotonic() - t0:.0f} s)"
                          if silent and command in REASKED else "")
                raise DomainError(f"guest agent: {command}: {exc.get_error_message()}{waited}",
                                  hint="is qemu-guest-agent installed and running in the "
                                  "guest?") from exc

    def read(self, path: str) -> str | None:
        """A small guest file (procfs), or None when it cannot be opened."""
        try:
            handle = self.call("guest-file-open", {"path": path, "mode": "r"})
        except DomainError:
            return None
        try:
            chunks = []
            while True:
                r = self.call("guest-file-read", {"handle": handle, "count": 65536})
                chunks.append(base64.b64decode(r.get("buf-b64", "")))
                if r.get("eof") or not r.get("count"):
                    break
            return b"".join(chunks).decode(errors="replace")
        except DomainError:
            return None
        finally:
            try:
                self.call("guest-file-close", {"handle": handle})
            except DomainError:
                pass


class QgaTarget(RemoteTarget):
    """The Target protocol in a user's guest, through qemu-guest-agent."""

    def __init__(self, agent: Agent, name: str, *, slack_s: float = 60.0) -> None:
        super().__init__(name, slack_s=slack_s)
        self.agent = agent

    def read(self, path: str) -> str | None:
        return self.agent.read(path)

    def _install(self, guest_path: str, data: bytes) -> None:
        try:
            handle = self.agent.call("guest-file-open", {"path": guest_path, "mode": "wb"})
            for i in range(0, len(data), COPY_CHUNK):
                self.agent.call("guest-file-write", {
                    "handle": handle,
                    "buf-b64": base64.b64encode(data[i:i + COPY_CHUNK]).decode()})
            self.agent.call("guest-file-close", {"handle": handle})
            pid = self.agent.call("guest-exec", {"path": "/bin/chmod",
                                                 "arg": ["0755", guest_path]})["pid"]
            while not self.agent.call("guest-exec-status", {"pid": pid}).get("exited"):
                time.sleep(0.1)  # guest-exec returns at once: wait for the mode to be set
        except DomainError as exc:
            raise VMError(exc.message) from exc

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        argv = self.with_tools([str(a) for a in argv])
        t0 = time.monotonic()
        try:
            started = self.agent.call("guest-exec", {"path": argv[0], "arg": argv[1:],
                                                     "capture-output": True})
        except DomainError as exc:
            if "No such file" in exc.message or "not found" in exc.message.lower():
                tool = Path(argv[0]).name
                raise ToolMissingError(tool, f"{package_of(tool)} (in the guest "
                                             f"{self.name}, with its package manager)") from exc
            raise
        pid = int(started["pid"])  # guest-exec failed above when the program is missing
        last: dict[str, Any] = {}

        def exited() -> bool:
            last.update(self.agent.call("guest-exec-status", {"pid": pid}))
            return bool(last.get("exited"))

        self._watch(argv, t0, timeout, exited, lambda: pid, lambda: None)
        status = last
        out = base64.b64decode(status.get("out-data", "")).decode(errors="replace")
        err = base64.b64decode(status.get("err-data", "")).decode(errors="replace")
        code = -int(status["signal"]) if status.get("signal") else int(status.get("exitcode", 0))
        if status.get("out-truncated") or status.get("err-truncated"):
            err += "\n[hugelab: the guest agent truncated this output]"
        return self.explain(ExecResult(argv, code, out, err, time.monotonic() - t0, {}))

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        try:
            handle = self.agent.call("guest-file-open", {"path": path, "mode": "w"})
            self.agent.call("guest-file-write", {
                "handle": handle, "buf-b64": base64.b64encode(data.encode()).decode()})
            self.agent.call("guest-file-close", {"handle": handle})
        except DomainError as exc:
            raise VMError(f"guest cannot write {path}: {exc.message}") from exc
