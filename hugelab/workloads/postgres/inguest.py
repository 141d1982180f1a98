"""One paired PostgreSQL trial where this process runs, its result printed as JSON: how a
trial runs inside hugelab's own guests (`Postgres.run` on a guest target execs
`python -m hugelab.workloads.postgres.inguest PARAMS BACKING` there). Those guests see the
host's root read-only, with tmpfs over /var/tmp and /tmp, so the same PostgreSQL, the same
cached template cluster and the same hugelab run inside, and the trial's cluster copy, server,
pgbench and the segment's evidence (the guest's smaps) are all the guest's own."""

from __future__ import annotations

import json
import sys
import time

from hugelab import proc
from hugelab.errors import HugelabError
from hugelab.workloads.base import ExecResult
from hugelab.workloads.postgres.guestio import encode


class Here:
    """A target that runs processes where this process runs (in the guest)."""

    name = "native"

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        t0 = time.perf_counter()
        cp = proc.run(argv, check=False, timeout=timeout)
        return ExecResult(list(argv), cp.returncode, cp.stdout, cp.stderr,
                          time.perf_counter() - t0)


def main(argv: list[str]) -> int:
    from hugelab.workloads.postgres.workload import Postgres
    table, backing = json.loads(argv[0]), argv[1]
    table["app"] = tuple(tuple(kv) for kv in table.get("app", ()))
    try:
        result = Postgres(**table).run(Here(), backing)
    except HugelabError as exc:
        print(f"postgres in the guest: {exc.message}", file=sys.stderr)
        return 3
    print(encode(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
