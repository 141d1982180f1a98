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
