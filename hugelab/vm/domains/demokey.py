"""Where hugelab's own SSH key for its demo domains lives: its state directory's ssh/id_ed25519
(hugelab.vm.domains.demo_domain.demo_key makes it; a domain's resolution checks an arm's key
against it), and a key's public half as both read it."""

from __future__ import annotations

from pathlib import Path

from hugelab.owned import state_dir


def demo_key_path() -> Path:
    """The private key's path in this state directory (made by demo_key, not here)."""
    return state_dir() / "ssh" / "id_ed25519"


def public_half(key: Path) -> str | None:
    """"TYPE BASE64" of private key `key`'s public half (KEY.pub), or None when unreadable."""
    try:
        words = Path(f"{key}.pub").read_text().split()
    except (OSError, UnicodeDecodeError):
        return None
    return " ".join(words[:2]) if len(words) >= 2 else None
