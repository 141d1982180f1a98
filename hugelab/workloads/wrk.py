"""wrk, the HTTP load generator a server kind loads its server with (Varnish): its command
line and one run of it, its Lua scripts over paths /o0 .. /o<n-1> (a preload asking each
once, then random ones) and its report's figures (pure)."""

from __future__ import annotations

import re
from pathlib import Path

from hugelab.errors import WorkloadError
from hugelab.workloads.base import ExecResult, Target
from hugelab.workloads.toolrun import check_exit, tail


def wrk_argv(binary: str, url: str, script: Path, conns: tuple[int, int], secs: float
             ) -> list[str]:
    """wrk with (threads, connections) for `secs` seconds, its latency report and `script`."""
    return [binary, "-t", str(conns[0]), "-c", str(conns[1]), "-d", f"{secs:g}s", "--latency",
            "-s", str(script), url]


def run_wrk(client: Target, binary: str, timeout_s: float, url: str, script: Path,
            conns: tuple[int, int], secs: float) -> ExecResult:
    """wrk once through `client`; WorkloadError when it failed."""
    res = client.exec(wrk_argv(binary, url, script, conns, secs), timeout=timeout_s)
    check_exit(res, "wrk")
    return res


def preload_lua(objects: int) -> str:
    """wrk's preload (pure): one connection asks /o0 ... /o<objects-1> once each, then ends
    wrk (os.exit: a wrk thread cannot end the run before its duration)."""
    return (f"local n, i = {objects}, -1\n"
            'function request() i = i + 1; return wrk.format(nil, "/o" .. i) end\n'
            "function response(status)\n  if status ~= 200 then os.exit(1) end\n"
            "  if i + 1 >= n then os.exit(0) end\nend\n")


def random_lua(objects: int) -> str:
    """wrk's timed run (pure): random paths among the preloaded objects."""
    return (f"local n, k = {objects}, 0\n"
            'function setup(thread) thread:set("id", k); k = k + 1 end\n'
            "function init() math.randomseed(os.time() * 97 + id) end\n"
            'function request() return wrk.format(nil, "/o" .. math.random(0, n - 1)) end\n')


def parse_wrk(text: str) -> dict[str, float]:
    """requests, seconds, requests/s and mean latency of one wrk run (pure); WorkloadError
    when it printed none or saw errors."""
    m = re.search(r"(\d+) requests in ([0-9.]+)(m?s)", text)
    r = re.search(r"Requests/sec:\s+([0-9.]+)", text)
    if m is None or r is None:
        raise WorkloadError(f"wrk printed no result\n  {tail(text, 5) or '(no output)'}")
    if bad := re.search(r"(Non-2xx or 3xx responses: \d+|Socket errors: .*)", text):
        raise WorkloadError(f"wrk: {bad.group(1)}")
    secs = float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    out = {"requests": float(m.group(1)), "seconds": secs, "requests_per_s": float(r.group(1))}
    if lat := re.search(r"Latency\s+([0-9.]+)(us|ms|s)\b", text):
        out["latency_avg_ms"] = float(lat.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[
            lat.group(2)]
    return out
