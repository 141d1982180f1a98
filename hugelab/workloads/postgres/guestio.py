"""What passes between a host and the guest side of a PostgreSQL trial in a guest
(inguest.py): the workload's parameters as JSON, and the result as one marked JSON line
(pure); and the host's half of such a trial (`run_in_own_guest`)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from hugelab.errors import WorkloadError
from hugelab.workloads.base import Target, WorkloadResult

MARK = "hugelab-postgres-result: "  # the line the host parses, whatever else was printed


def params(workload: Any) -> str:
    """The workload's parameters as JSON for the guest side, those left unset (None) out, so
    the guest's own defaults apply (pure)."""
    fields = {f.name: getattr(workload, f.name) for f in dataclasses.fields(workload)
              if f.init and getattr(workload, f.name) is not None}
    fields["app"] = [list(kv) for kv in fields.get("app", ())]
    return json.dumps(fields)


def encode(result: WorkloadResult) -> str:
    return MARK + json.dumps(dataclasses.asdict(result))


def decode(stdout: str) -> WorkloadResult | None:
    """The result line of a guest run's output; None when there is none (pure)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            return WorkloadResult(**json.loads(line[len(MARK):]))
    return None


def run_in_own_guest(w: Any, target: Target, backing: str) -> WorkloadResult:
    """The host's half: the trial of Postgres workload `w` inside one of hugelab's own guests,
    which see this host's root, by hugelab.workloads.postgres.inguest run there (on the
    template built here first)."""
    argv = [sys.executable, "-m", "hugelab.workloads.postgres.inguest", params(w), backing]
    res = target.exec(argv, timeout=w.exec_timeout(w.duration_s) + 120.0)
    result = decode(res.stdout)
    if result is None:
        why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        raise WorkloadError(f"postgres in guest {getattr(target, 'name', '?')}: {why}")
    result.info["where"] = "guest"
    return result
