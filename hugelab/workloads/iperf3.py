"""iperf3 over loopback (127.0.0.1 only): a one-off server and a JSON-reporting client.

Server: `iperf3 -s -1 -p PORT -B 127.0.0.1` (exits after one test). Client:
`iperf3 -c 127.0.0.1 -p PORT -J -t T [-R] [-P N]`; `-R` makes the server send (reverse).
The client runs in the Target; the server runs wherever the `server` side puts it:
natively a `LocalServer` (a subprocess of hugelab, stopped in `finally`); for a guest the VM
code passes a ServerSide that starts it in the guest and returns the host end of a port
forward (see hugelab.workloads.serverside.ServerSide). Primary: receiver Gbit/s (higher).
Such a handle may carry `retry_until` (time.monotonic()): a one-off server cannot be probed for
readiness without using up its test, so the client is retried while its JSON says it never got
a connection to a server (hugelab.vm.netserver).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
from hugelab.workloads.kind import (
    SERVER_PORT,
    Kind,
    ServerInGuest,
    Tool,
    key,
    keys_of,
    program,
)
from hugelab.workloads.process_thp import check_mode, target_for, wrap
from hugelab.workloads.serverside import LOOPBACK, ServerHandle, ServerSide, default_server
from hugelab.workloads.toolrun import THP_ONLY_NOTE, check_backing, check_exit, tail

RETRY_PAUSE_S = 0.5


def parse_json(text: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics and run facts from `iperf3 -J` client output (pure).

    iperf3 3.12 exits 0 even when it cannot connect; its JSON then has an "error" key."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"iperf3 printed no valid JSON ({exc})\n  {tail(text, 5)}") from exc
    if not isinstance(doc, dict):
        raise WorkloadError("iperf3 JSON is not an object")
    if doc.get("error"):
        raise WorkloadError(f"iperf3 failed: {doc['error']}")
    end = doc.get("end") or {}
    sent, received = end.get("sum_sent"), end.get("sum_received")
    if not isinstance(sent, dict) or not isinstance(received, dict):
        raise WorkloadError("iperf3 JSON lacks end.sum_sent/end.sum_received (a UDP test?)")
    metrics = {
        "sender_bps": float(sent["bits_per_second"]),
        "receiver_bps": float(received["bits_per_second"]),
        "sender_gbps": float(sent["bits_per_second"]) / 1e9,
        "receiver_gbps": float(received["bits_per_second"]) / 1e9,
        "bytes_sent": float(sent.get("bytes", 0)),
        "bytes_received": float(received.get("bytes", 0)),
        "duration_s": float(received.get("seconds", 0.0)),
    }
    if "retransmits" in sent:
        metrics["retransmits"] = float(sent["retransmits"])
    cpu = end.get("cpu_utilization_percent") or {}
    for side in ("host_total", "remote_total"):
        if side in cpu:
            metrics[f"cpu_{side}_pct"] = float(cpu[side])
    start = doc.get("start") or {}
    test = start.get("test_start") or {}
    facts = {"version": str(start.get("version", "")).removeprefix("iperf ") or None,
             "reverse": bool(test.get("reverse", 0)), "streams": test.get("num_streams"),
             "protocol": test.get("protocol")}
    return metrics, facts


def never_connected(stdout: str) -> bool:
    """Whether `iperf3 -J` client output says it failed before any measurement (pure):
    an "error" and no intervals, as when the port answers but no server is behind it yet."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        return False
    return isinstance(doc, dict) and bool(doc.get("error")) and not doc.get("intervals")


@dataclass(frozen=True)
class IPerf3:
    """One TCP iperf3 test over 127.0.0.1; `reverse=True` adds -R (server sends)."""

    duration_s: int = key(5, "iperf3 -t: how long the client sends", unit="s")
    reverse: bool = key(False, "iperf3 -R: the server sends")
    parallel: int = key(1, "iperf3 -P: parallel streams")
    port: int | None = key(None, SERVER_PORT)  # a guest server side may differ
    binary: str = key("iperf3", program("binary", "iperf3 client"))
    server_binary: str | None = key(None, "the server's program (none: binary)")
    server: ServerSide | None = field(default=None, compare=False, repr=False)
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    kind: str = field(default="iperf3", init=False)

    def __post_init__(self) -> None:
        check_mode("iperf3", self.process_thp)
        if self.duration_s < 1 or self.parallel < 1:
            raise ExperimentError("iperf3: duration_s and parallel must be at least 1")
        if self.port is not None and not 0 < self.port < 65536:
            raise ExperimentError(f"iperf3: port {self.port} is out of range")

    def server_argv(self, port: int) -> list[str]:
        """One-off server bound to loopback only (pure)."""
        return [self.server_binary or self.binary, "-s", "-1", "-p", str(port), "-B", LOOPBACK]

    def client_argv(self, port: int) -> list[str]:
        """JSON-reporting client to 127.0.0.1:port (pure)."""
        argv = [self.binary, "-c", LOOPBACK, "-p", str(port), "-J", "-t", str(self.duration_s)]
        if self.reverse:
            argv.append("-R")
        if self.parallel > 1:
            argv += ["-P", str(self.parallel)]
        return argv

    def parse(self, res: ExecResult) -> WorkloadResult:
        """Metrics of one finished client run (pure); WorkloadError when it failed."""
        if res.returncode != 0 and res.stdout.lstrip().startswith("{"):
            parse_json(res.stdout)  # raises with iperf3's own "error" text when it has one
        check_exit(res, "iperf3")
        metrics, facts = parse_json(res.stdout)
        info: dict[str, Any] = {"tool": "iperf3", **facts,
                                "direction": "reverse (server sends)" if self.reverse
                                else "forward (client sends)", "warnings": []}
        return WorkloadResult(metrics=metrics, primary="receiver_gbps", unit="Gbit/s",
                              better="higher", info=info)

    def _client(self, target: Target, handle: ServerHandle) -> tuple[ExecResult, int]:
        """Run the client; retry while it never reached a server and the handle allows it.

        A server side that cannot tell when a one-off server listens (one in a guest behind a
        port forward: probing would use up its one test) sets `retry_until` on its handle.
        Returns the last run and how many runs it took."""
        argv = self.client_argv(handle.client_port)
        attempts = 0
        while True:
            res = target.exec(argv, timeout=self.duration_s + 60.0)
            attempts += 1
            retry_until = float(getattr(handle, "retry_until", 0.0))
            if not never_connected(res.stdout) or time.monotonic() + RETRY_PAUSE_S > retry_until:
                return res, attempts
            time.sleep(RETRY_PAUSE_S)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        check_backing(backing)
        side = default_server(self.server, target, "iperf3", self.port)
        handle = side.start(lambda port: wrap(self.server_argv(port), self.process_thp, target),
                            "iperf3")
        target = target_for(target, self.process_thp)
        server_out = ""
        try:
            res, attempts = self._client(target, handle)
        finally:
            server_out = handle.stop()
        result = self.parse(res)
        result.evidence["server_output_tail"] = server_out
        result.evidence["client_attempts"] = attempts
        result.info["backing"] = backing
        result.info["backing_note"] = THP_ONLY_NOTE
        return result


def stop(port: int) -> None:
    """End a `-s -1` server that never saw its client: one connection that closes at once."""
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=2.0):
        pass


KIND = Kind(keys=keys_of(IPerf3), name="iperf3", workload=IPerf3,
            summary="iperf3 TCP throughput, host<->guest through a 127.0.0.1 port forward",
            role="client-server", where=frozenset({"host", "guest"}),
            tools=(Tool("iperf3", "iperf3"),), duration=("duration_s", 5.0),
            server=ServerInGuest("iperf3", 5201, None, stop),
            refusals={"domain": "iperf3 runs its server in hugelab's own guests (a NIC with a "
                                "127.0.0.1 forward); a user's domain keeps its own network"})
