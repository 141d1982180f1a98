"""What passes between a host and the guest side of a PostgreSQL trial in a guest
(inguest.py): the workload's parameters as JSON, and the result as one marked JSON line
(pure)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hugelab.workloads.base import WorkloadResult

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
