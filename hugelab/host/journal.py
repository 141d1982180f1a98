"""The host-change journal: every change is written here *before* it is made.

A journal is a JSON file in the state directory (mode 0600, directory 0700). Restoring replays
its entries in reverse, putting back each old value, so the host ends exactly as it was before
the first entry. A journal left by a killed process is replayed by `hugelab recover` or by the
next host-changing command.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hugelab.errors import HostError
from hugelab.owned import ensure_private_dir, state_dir


def write_private(path: Path, text: str) -> None:
    """Atomically write `text` to `path` with mode 0600 and fsync it."""
    ensure_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class Journal:
    """Entries: {"kind": "write", "path", "old", "new"}, {"kind": "pool", "path", ...},
    {"kind": "mount", "target", "created"} or {"kind": "memcg", "path", "root", "version"} (a
    session's memory cgroup, recorded before it is made; hugelab.host.memcg)."""

    path: Path
    owner: int = field(default_factory=os.getpid)
    entries: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def default(cls) -> Journal:
        return cls(state_dir() / "journal.json")

    @classmethod
    def load(cls, path: Path) -> Journal | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            raise HostError(f"cannot read journal {path}: {exc}",
                            hint="inspect it by hand; delete it only after checking the host") from exc
        return cls(path, int(data.get("owner", 0)), list(data.get("entries", [])))

    def record(self, entry: dict[str, Any]) -> None:
        """Append an entry and make it durable before the caller changes the host."""
        self.entries.append(entry)
        write_private(self.path, json.dumps({"owner": self.owner, "entries": self.entries}, indent=1))

    def clear(self) -> None:
        self.entries.clear()
        self.path.unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(self.entries)


@contextmanager
def locked(journal_path: Path, wait_s: float = 0.0) -> Iterator[None]:
    """An exclusive advisory lock beside the journal: one host-changing hugelab at a time.
    `wait_s`: how long to wait for a holder that is finishing (a killed hugelab's lock goes
    when its process is gone) before giving up."""
    import fcntl

    ensure_private_dir(journal_path.parent)
    lock = journal_path.with_suffix(".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() >= deadline:
                    raise HostError("another hugelab process is changing this host right now",
                                    hint="wait for it to finish, or stop it; its changes will be "
                                         "restored") from exc
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)
