"""One experiment through the real CLI for the bench scripts: `hugelab run` into its own
store, then `hugelab report --json` of it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HUGELAB = [sys.executable, "-m", "hugelab.cli"]


def run_and_report(exp: Path, store: Path, extra: list[str], timeout: float
                   ) -> tuple[dict[str, Any] | None, str, float]:
    """(the report's JSON, or None when the run failed; the run's output tail on failure;
    the run's minutes)."""
    t0 = time.monotonic()
    run = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(store), *extra],
                         capture_output=True, text=True, timeout=timeout)
    minutes = (time.monotonic() - t0) / 60
    if run.returncode != 0:
        return None, (run.stdout + run.stderr)[-800:], minutes
    rep = json.loads(subprocess.run([*HUGELAB, "report", "--store", str(store), "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    return rep, "", minutes
