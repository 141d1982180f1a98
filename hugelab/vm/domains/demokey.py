"""Where hugelab's own SSH key for its demo domains lives: its state directory's ssh/id_ed25519
(hugelab.vm.domains.demo_domain.demo_key makes it; a domain's resolution checks an arm's key
against it)."""

from __future__ import annotations

from pathlib import Path

from hugelab.owned import state_dir


def demo_key_path() -> Path:
    """The private key's path in this state directory (made by demo_key, not here)."""
    return state_dir() / "ssh" / "id_ed25519"
