"""One `hugelab run EXPERIMENT --blocks 1` with the TCG guest CPU `max` as shipped (`max`), or
without the fast-string features ERMS and FSRM (`no-erms`), for timing the two against each
other (hugelab.vm.common.cpumodel).

    flock /run/lock/hugelab-tests-host.lock \
        .venv/bin/python bench/tcg_cpu.py max|no-erms examples/002-host-x-guest-2x2.toml

Each call uses a fresh state directory and store (cold, as the examples test runs them); the
cache directory is the host's (the kernel image and initramfs, as in the suite). Under KVM the
model is `host` either way: this compares TCG only. Results: docs/benchmarks.md, "Guests under
TCG: the CPU model"."""

from __future__ import annotations

import os
import sys
import tempfile

from hugelab.cli.main import main
from hugelab.vm.common import cpumodel


def run(which: str, experiment: str) -> int:
    if which not in ("max", "no-erms"):
        raise SystemExit("usage: tcg_cpu.py max|no-erms EXPERIMENT")
    if which == "no-erms":
        cpumodel.TCG_FEATURES_OFF = ("erms", "fsrm")
    with tempfile.TemporaryDirectory(prefix="tcg-cpu-") as tmp:
        os.environ["HUGELAB_STATE_DIR"] = f"{tmp}/state"
        return main(["run", experiment, "--blocks", "1", "--store", f"{tmp}/s.db"])


if __name__ == "__main__":
    sys.exit(run(*sys.argv[1:3]))
