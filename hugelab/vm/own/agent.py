"""The in-guest agent: JSON requests in, JSON replies out, over a virtio-serial port.

Runs inside the guest as PID 1 (the initramfs `switch_root`s into it), with the host's own
Python from the read-only 9p root. Standard library only; this file is also copied verbatim into
the initramfs, so it must not import hugelab.

Protocol: one JSON object per line in each direction. Every request has an `id` and an `op`;
every reply echoes the `id` and has `ok` (bool), plus either the result fields or `error`
(text) and `kind` ("enoent", "oserror", "timeout", "bad-request").

    {"id": 1, "op": "ping"}
    {"id": 2, "op": "exec", "argv": ["cat", "/proc/meminfo"], "timeout": 60, "env": {}, "cwd": "/"}
    {"id": 3, "op": "read", "path": "/proc/vmstat"}
    {"id": 4, "op": "write", "path": "/sys/kernel/mm/transparent_hugepage/enabled", "data": "never"}
    {"id": 5, "op": "poweroff"}

exec replies carry returncode, stdout, stderr, wall_s, rusage (minflt, majflt, utime_s, stime_s,
maxrss_kb, nvcsw, nivcsw) and timed_out. Processes run from argv lists, never through a shell,
each in a new session. With `"sample": SECONDS` the agent samples the process's whole tree
(its session) while it runs, as hugelab.trial.procscan does on the host, and the reply
carries the peak as `tree`.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    from hugelab.trial import procscan  # on the host (tests import this module)
except ImportError:  # in the guest: the initramfs copies procscan.py next to this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import procscan  # type: ignore[no-redef]

PORT_NAME = "hugelab.0"
MAX_OUTPUT = 32 * 1024 * 1024
RB_POWER_OFF = 0x4321FEDC


def log(msg: str) -> None:
    try:
        with open("/dev/console", "w") as c:
            c.write(f"hugelab-agent: {msg}\n")
    except OSError:
        pass


def find_port(name: str, wait_s: float = 20.0) -> str:
    """Path of the virtio-serial port called `name` (udev link, or found through sysfs)."""
    deadline = time.monotonic() + wait_s
    while True:
        link = f"/dev/virtio-ports/{name}"
        if os.path.exists(link):
            return link
        base = "/sys/class/virtio-ports"
        for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            try:
                with open(f"{base}/{dev}/name") as f:
                    if f.read().strip() == name and os.path.exists(f"/dev/{dev}"):
                        return f"/dev/{dev}"
            except OSError:
                continue
        if time.monotonic() > deadline:
            raise RuntimeError(f"virtio-serial port {name} not found")
        time.sleep(0.1)


def _read_capped(f) -> tuple[str, bool]:
    f.seek(0)
    data = f.read(MAX_OUTPUT + 1)
    return data[:MAX_OUTPUT].decode("utf-8", "replace"), len(data) > MAX_OUTPUT


def _child_env(extra: dict | None) -> dict:
    env = dict(os.environ)
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


def op_exec(req: dict) -> dict:
    argv = req.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return {"ok": False, "kind": "bad-request", "error": "argv must be a non-empty list of strings"}
    timeout = req.get("timeout")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 env=_child_env(req.get("env")), cwd=req.get("cwd") or "/tmp",
                                 start_new_session=True)
        except FileNotFoundError as exc:
            return {"ok": False, "kind": "enoent", "error": str(exc)}
        except OSError as exc:
            return {"ok": False, "kind": "oserror", "error": str(exc)}
        sampler = None
        if req.get("sample"):
            sampler = procscan.TreeSampler(lambda: procscan.find_members([p.pid]),
                                           float(req["sample"])).start()
        p.returncode, usage, timed_out = procscan.wait_tree(p.pid, timeout)
        wall = time.perf_counter() - t0
        tree = sampler.stop() if sampler is not None else None
        stdout, trunc_o = _read_capped(out)
        stderr, trunc_e = _read_capped(err)
    return {"ok": True, "argv": argv, "returncode": p.returncode, "stdout": stdout,
            "stderr": stderr, "wall_s": wall, "timed_out": timed_out,
            "truncated": trunc_o or trunc_e, "tree": tree,
            "rusage": usage}


def op_read(req: dict) -> dict:
    with open(req["path"], "rb") as f:
        return {"ok": True, "data": f.read(MAX_OUTPUT).decode("utf-8", "replace")}


def op_write(req: dict) -> dict:
    # sysfs wants a single write() of the whole value; no O_TRUNC/O_CREAT games.
    fd = os.open(req["path"], os.O_WRONLY | (os.O_CREAT if req.get("create") else 0), 0o644)
    try:
        os.write(fd, str(req["data"]).encode())
    finally:
        os.close(fd)
    return {"ok": True}


def op_ping(req: dict) -> dict:
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return {"ok": True, "pid": os.getpid(), "uptime_s": uptime, "release": os.uname().release,
            "python": sys.version.split()[0]}


OPS = {"exec": op_exec, "read": op_read, "write": op_write, "ping": op_ping}


def handle(req: dict) -> dict:
    op = req.get("op")
    fn = OPS.get(str(op))
    if fn is None:
        return {"ok": False, "kind": "bad-request", "error": f"unknown op {op!r}"}
    try:
        return fn(req)
    except KeyError as exc:
        return {"ok": False, "kind": "bad-request", "error": f"missing field {exc}"}
    except FileNotFoundError as exc:
        return {"ok": False, "kind": "enoent", "error": str(exc)}
    except OSError as exc:
        return {"ok": False, "kind": "oserror", "error": str(exc), "errno": exc.errno}


def reap_orphans() -> None:
    """As PID 1 we inherit orphans; collect their exit status between requests."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def write_all(fd: int, data: bytes) -> None:
    while data:
        n = os.write(fd, data)
        data = data[n:]


def poweroff() -> None:
    os.sync()
    if os.getpid() != 1:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.reboot(RB_POWER_OFF)


def serve(fd: int) -> None:
    buf = b""
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:  # host side not connected (yet / any more): wait for it
            time.sleep(0.05)
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                req = json.loads(line)
            except ValueError as exc:
                write_all(fd, json.dumps({"id": None, "ok": False, "kind": "bad-request",
                                          "error": f"bad JSON: {exc}"}).encode() + b"\n")
                continue
            if req.get("op") == "poweroff":
                write_all(fd, json.dumps({"id": req.get("id"), "ok": True}).encode() + b"\n")
                poweroff()
                return
            reply = handle(req)
            reply["id"] = req.get("id")
            write_all(fd, json.dumps(reply).encode() + b"\n")
            reap_orphans()


def main(argv: list[str]) -> int:
    name = PORT_NAME
    if len(argv) >= 2 and argv[0] == "--port":
        name = argv[1]
    try:
        path = find_port(name)
        fd = os.open(path, os.O_RDWR)
        log(f"serving on {path}")
        write_all(fd, json.dumps({"id": None, "ok": True, "hello": True}).encode() + b"\n")
        serve(fd)
    except Exception as exc:  # noqa: BLE001 - PID 1 must report, then power off
        log(f"FATAL: {type(exc).__name__}: {exc}")
        poweroff()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
