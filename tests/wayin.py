"""A scripted way into a user's domain (hugelab.workloads.guestside.Way) for tests that start
no program: the guest's files in a dict, every exec recorded; a kind's test supplies its
programs' outputs in `exec`."""

from __future__ import annotations

from typing import Any


class ScriptedWay:
    name = "vm0"
    place = "domain"

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.log: list[list[str]] = []

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str:
        from hugelab.errors import VMError
        if path not in self.files:
            raise VMError(f"cannot read {path}")
        return self.files[path]

    def write_file(self, path: str, data: Any, *, wait_s: float = 60.0) -> None:
        self.files[path] = data

    def file_op(self, prog: str, run: list[str]) -> int | None:
        """`test -e PATH`, `touch PATH` and `mv A B` over the guest's files (what a domain's
        layer needs of them, hugelab.vm.domains.layer); None for any other program."""
        if prog == "test":
            return 0 if run[-1] in self.files else 1
        if prog == "touch":
            self.files[run[-1]] = ""
            return 0
        if prog == "mv":  # everything under A moves under B
            a, b = run[-2], run[-1]
            for path in [p for p in self.files if p == a or p.startswith(a + "/")]:
                self.files[b + path[len(a):]] = self.files.pop(path)
            return 0
        return None
