"""The in-guest agent, exercised on the host (it is plain stdlib Python)."""

import json
import os
import socket
import threading

from hugelab.vm.own import agent


def test_exec_structured_result():
    r = agent.handle({"op": "exec", "argv": ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]})
    assert r["ok"] and r["returncode"] == 3
    assert r["stdout"] == "out\n" and r["stderr"] == "err\n"
    assert r["wall_s"] > 0 and set(r["rusage"]) >= {"minflt", "utime_s", "maxrss_kb"}
    assert not r["timed_out"]


def test_exec_env_and_timeout():
    r = agent.handle({"op": "exec", "argv": ["/bin/sh", "-c", "echo $HL_X"], "env": {"HL_X": "7"}})
    assert r["stdout"] == "7\n"
    r = agent.handle({"op": "exec", "argv": ["/bin/sleep", "60"], "timeout": 0.2})
    assert r["ok"] and r["timed_out"] and 0.2 <= r["wall_s"] < 60  # not waited to its end


def test_errors_are_typed():
    assert agent.handle({"op": "exec", "argv": ["/no/such/tool"]})["kind"] == "enoent"
    assert agent.handle({"op": "exec", "argv": "ls -l"})["kind"] == "bad-request"
    assert agent.handle({"op": "nope"})["kind"] == "bad-request"
    assert agent.handle({"op": "read"})["kind"] == "bad-request"
    assert agent.handle({"op": "read", "path": "/no/such"})["kind"] == "enoent"


def test_read_write(tmp_path):
    f = tmp_path / "x"
    assert agent.handle({"op": "write", "path": str(f), "data": "42", "create": True})["ok"]
    assert agent.handle({"op": "read", "path": str(f)})["data"] == "42"
    assert "MemTotal" in agent.handle({"op": "read", "path": "/proc/meminfo"})["data"]


def test_serve_over_a_socket():
    host, guest = socket.socketpair()
    t = threading.Thread(target=agent.serve, args=(guest.fileno(),), daemon=True)
    t.start()
    f = host.makefile("rwb")
    for req in ({"id": 1, "op": "ping"}, {"id": 2, "op": "exec", "argv": ["/bin/echo", "hi"]}):
        f.write(json.dumps(req).encode() + b"\n")
        f.flush()
    f.write(b"not json\n")
    f.flush()
    replies = [json.loads(f.readline()) for _ in range(3)]
    assert replies[0]["id"] == 1 and replies[0]["pid"] == os.getpid()
    assert replies[1]["id"] == 2 and replies[1]["stdout"] == "hi\n"
    assert replies[2]["kind"] == "bad-request"
    f.write(b'{"id": 3, "op": "poweroff"}\n')
    f.flush()
    assert json.loads(f.readline()) == {"id": 3, "ok": True}
    t.join(10)
    assert not t.is_alive()
    host.close()
    guest.close()
