"""What a PostgreSQL trial says about itself beside its metrics and its segment's evidence
(its info): the tool that loaded it, the server's version, settings and output tail (read
while it runs), the user's data and the blocks pg_prewarm read."""

from __future__ import annotations

from typing import Any

from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.postgres import cluster, userdata
from hugelab.workloads.serverside import ServerHandle, output_so_far


def tail(handle: ServerHandle) -> str:
    """The server's last 20 lines of output, read while it runs."""
    return "\n".join(output_so_far(handle).strip().splitlines()[-20:])


def info(w: Any, backing: str, own: dict[str, Any]) -> dict[str, Any]:
    """Postgres workload `w`'s trial info on `backing`; `own`: the trial's tool,
    server_output_tail and prewarmed_blocks."""
    return {"tool": own["tool"], "version": cluster.version(w._bin()), "backing": backing,
            "settings": w.settings(backing), "builtin": w.script or w.builtin,
            "server_output_tail": own["server_output_tail"],
            "warnings": w.settings_warnings(backing), **userdata.info(w),
            **({"prewarmed_blocks": own["prewarmed_blocks"]} if w.prewarm else {})}


def windows(result: WorkloadResult, windows: list[dict[str, float]], window_s: float) -> None:
    """An interleaved trial's windows of `window_s` into its result (none for one window, a
    paired trial's): the duration they ran and each one's tps as a rep."""
    if len(windows) > 1:
        result.metrics["duration_s"] = window_s * len(windows)
        tps = [w["tps"] for w in windows]
        result.info["reps"] = {"n": len(tps), "values": tps, "unit": "window",
                               "wall_s": [window_s] * len(tps)}
