"""The Target inside one of hugelab's own guests (`AgentTarget`, a
hugelab.vm.common.guestapi.GuestTarget): argv runs through the agent's channel, with rusage and
the process tree's peak from the guest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hugelab.errors import CommandError, ToolMissingError, VMError
from hugelab.proc import package_of
from hugelab.trial.procscan import merge_peak
from hugelab.vm.own.agentchannel import AgentChannel
from hugelab.workloads.base import ExecResult


class AgentTarget:
    """The Target protocol inside a guest: argv runs via the agent, rusage from the guest."""

    def __init__(self, channel: AgentChannel, name: str = "vm0", *, slack_s: float = 60.0,
                 env: dict[str, str] | None = None, sample_s: float | None = 0.25) -> None:
        self.name = name
        self.channel = channel
        self.slack_s = slack_s
        self.env = env
        self.sample_s = sample_s
        self.trees: list[dict[str, Any]] = []  # in-guest process-tree evidence, one per exec

    def tree(self) -> dict[str, Any]:
        """The peak of every sampled exec's tree so far (see hugelab.trial.procscan)."""
        seen = [t for t in self.trees if t.get("samples")]
        out: dict[str, Any] = {}
        for t in seen:
            out = merge_peak(out, t)
        if seen:
            out["samples"] = sum(int(t["samples"]) for t in seen)
        return out

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        wait = None if timeout is None else timeout + self.slack_s
        reply = self.channel.request("exec", wait, argv=argv, timeout=timeout, env=self.env,
                                     sample=self.sample_s)
        if isinstance(reply.get("tree"), dict):
            self.trees.append(reply["tree"])
        if not reply.get("ok"):
            if reply.get("kind") == "enoent":
                tool = Path(argv[0]).name
                raise ToolMissingError(tool, package_of(tool))
            raise VMError(f"guest could not run {argv[0]}: {reply.get('error')}")
        if reply.get("timed_out"):
            raise CommandError(argv, -1, f"timed out after {timeout}s (in guest {self.name})\n"
                               f"{reply.get('stderr', '')}")
        return ExecResult(argv, int(reply["returncode"]), reply["stdout"], reply["stderr"],
                          float(reply["wall_s"]), {k: float(v) for k, v in reply["rusage"].items()})

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str:
        reply = self.channel.request("read", wait_s, path=path)
        if not reply.get("ok"):
            raise VMError(f"guest cannot read {path}: {reply.get('error')}")
        return str(reply["data"])

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        """Write a guest file (sysfs: THP mode, pools) with one write()."""
        reply = self.channel.request("write", wait_s, path=path, data=data)
        if not reply.get("ok"):
            raise VMError(f"guest cannot write {data!r} to {path}: {reply.get('error')}")

    def ping(self, wait_s: float | None = 30.0) -> dict[str, Any]:
        return self.channel.request("ping", wait_s)
