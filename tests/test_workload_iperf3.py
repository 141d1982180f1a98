"""iperf3 over 127.0.0.1: argv, JSON parser (live and saved 3.12 output), pluggable server."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hugelab.errors import ToolMissingError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import ExecResult
from hugelab.workloads.iperf3 import IPerf3, parse_json
from hugelab.workloads.serverside import LocalServer, ServerHandle, free_port, listening

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

DATA = Path(__file__).parent / "data"
needs_iperf3 = pytest.mark.skipif(shutil.which("iperf3") is None,
                                  reason="iperf3 not installed (apt-get install iperf3)")


def test_argv_is_loopback_only():
    w = IPerf3(duration_s=3, reverse=True, parallel=2)
    assert w.server_argv(5201) == ["iperf3", "-s", "-1", "-p", "5201", "-B", "127.0.0.1"]
    assert w.client_argv(5201) == ["iperf3", "-c", "127.0.0.1", "-p", "5201", "-J", "-t", "3",
                                   "-R", "-P", "2"]
    assert "-R" not in IPerf3().client_argv(1)


def test_parse_saved_forward_and_reverse():
    fwd, facts = parse_json((DATA / "iperf3-3.12-client.json").read_text())
    assert facts["version"] == "3.12" and facts["reverse"] is False
    assert fwd["receiver_gbps"] == pytest.approx(fwd["receiver_bps"] / 1e9)
    assert fwd["sender_bps"] > 0 and "retransmits" in fwd
    rev, facts = parse_json((DATA / "iperf3-3.12-client-reverse.json").read_text())
    assert facts["reverse"] is True and rev["receiver_bps"] > 0


def test_connection_error_json_is_workload_error():
    # iperf3 3.12 exits 0 here; the JSON carries the error
    text = (DATA / "iperf3-3.12-connection-refused.json").read_text()
    with pytest.raises(WorkloadError, match="Connection refused"):
        IPerf3().parse(ExecResult(["iperf3"], 0, text, "", 0.1))


def test_not_json():
    with pytest.raises(WorkloadError, match="no valid JSON"):
        parse_json("iperf3: error - whatever")


@dataclass
class RecordingServer:
    """A ServerSide that delegates to LocalServer and records what it was asked to start,
    standing in for the VM engineer's guest-side server."""

    started: list[list[str]] = field(default_factory=list)
    stopped: int = 0

    def start(self, argv_for_port, tool: str) -> ServerHandle:
        outer = self

        def record(port: int) -> list[str]:
            argv = argv_for_port(port)
            outer.started.append(argv)
            return argv

        inner = LocalServer().start(record, tool)

        class Handle:
            client_port = inner.client_port

            def stop(self) -> str:
                outer.stopped += 1
                return inner.stop()

        return Handle()


@pytest.mark.server
@needs_iperf3
@pytest.mark.parametrize("reverse", [False, True])
def test_end_to_end_both_directions_with_pluggable_server(reverse):
    server = RecordingServer()
    res = IPerf3(duration_s=1, reverse=reverse, server=server).run(NativeTarget(), "4k")
    assert res.primary == "receiver_gbps" and res.unit == "Gbit/s" and res.value > 0
    assert res.info["reverse"] is reverse and res.info["version"] == "3.12"
    assert server.stopped == 1 and server.started[0][-2:] == ["-B", "127.0.0.1"]
    port = int(server.started[0][server.started[0].index("-p") + 1])
    assert not listening(port), "server gone after the run"


@pytest.mark.server
@needs_iperf3
def test_live_json_parse_with_default_local_server():
    w = IPerf3(duration_s=1)
    handle = LocalServer().start(w.server_argv, "iperf3")
    try:
        live = NativeTarget().exec(w.client_argv(handle.client_port), timeout=30)
    finally:
        handle.stop()
    metrics, _ = parse_json(live.stdout)
    assert metrics["receiver_bps"] > 0 and json.loads(live.stdout)["start"]["connected"]


@pytest.mark.tools
@needs_iperf3
def test_client_error_when_nothing_listens():
    class Nothing:
        def start(self, argv_for_port, tool):
            class H:
                client_port = free_port()

                def stop(self):
                    return ""
            return H()

    with pytest.raises(WorkloadError, match="unable to connect"):
        IPerf3(duration_s=1, server=Nothing()).run(NativeTarget(), "4k")


def test_guest_target_without_server_side_is_refused():
    class Guest:
        name = "vm0"

        def exec(self, argv, *, timeout=None):
            raise AssertionError("must not run")

    with pytest.raises(WorkloadError, match="no server side"):
        IPerf3().run(Guest(), "4k")


def test_missing_binary_names_the_package():
    with pytest.raises(ToolMissingError) as ei:
        IPerf3(binary="/nonexistent/iperf3", duration_s=1).run(NativeTarget(), "4k")
    assert ei.value.package == "iperf3"
