"""The Debian packages every registered kind declares, for bootstrap (one per line):

    python -m hugelab.workloads.packages          # what a measurement host needs
    python -m hugelab.workloads.packages --test   # and what only the test suite needs
"""

from __future__ import annotations

import sys

from hugelab.workloads.registry import kinds


def packages(test: bool = False) -> list[str]:
    """Sorted, without repeats: the packages of every kind's tools (and test-only packages)."""
    out = {t.package for k in kinds().values() for t in k.tools}
    if test:
        out |= {p for k in kinds().values() for p in k.test_packages}
    return sorted(out)


def main(argv: list[str]) -> int:
    print("\n".join(packages(test="--test" in argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
