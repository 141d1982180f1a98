"""libvirtd, as both kinds of guest use it: hugelab's own guests under libvirtd and users'
transient copies are transient domains with autodestroy, each with a directory under
OVERLAY_ROOT (where libvirt's QEMU user can read) and a 0600 record in the state directory,
written before the domain starts, so `recover_domains()` (called by `hugelab recover` and at
every run's start) destroys what a killed run left and deletes its directory.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from hugelab import identity
from hugelab.errors import VMError
from hugelab.owned import ensure_private_dir, state_dir
from hugelab.vm.common.spec import safe_name

OVERLAY_ROOT = Path("/var/lib/libvirt/images/hugelab")
PID_DIR = Path("/run/libvirt/qemu")


class DomainError(VMError):
    """libvirt or the guest agent cannot do what the arm needs."""


def libvirt_module() -> Any:
    try:
        import libvirt
    except ImportError as exc:
        raise DomainError("libvirt-python is not installed",
                          hint="./bootstrap setup installs it (apt libvirt-dev, pip "
                          "libvirt-python)") from exc
    libvirt.registerErrorHandler(_quiet, None)  # errors are raised, never printed by libvirt
    return libvirt


def _quiet(_ctx: object, _err: object) -> None:
    return None


def connect(uri: str) -> Any:
    lv = libvirt_module()
    try:
        return lv.open(uri)
    except lv.libvirtError as exc:
        raise DomainError(f"cannot connect to libvirt at {uri}: {exc.get_error_message()}",
                          hint="is libvirtd running? start it: `virtlogd -d; libvirtd -d` (or "
                          "systemctl start libvirtd)") from exc


def transient_name(domain: str, target: str) -> str:
    """Unique per copy: two arms of a duet block start copies of one domain at once."""
    return f"hugelab-{safe_name(domain)}-{target}-{os.getpid()}-{secrets.token_hex(4)}"


def records_dir() -> Path:
    return state_dir() / "domains"


def write_record(dom_name: str, uri: str, files: Path, of: str) -> Path:
    """The 0600 record `recover_domains` acts on: the transient domain `dom_name` on `uri`, its
    files (a directory under OVERLAY_ROOT), what it is a copy of, and the run that owns it."""
    ensure_private_dir(records_dir())
    record = records_dir() / f"{dom_name}.json"
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"domain": dom_name, "uri": uri, "overlays": str(files), "of": of,
                   **identity.record(prefix="")}, f)
    return record


def destroy(conn: Any, name: str, tries: int = 3) -> bool:
    """Make sure transient domain `name` is gone: True when it is (destroyed now, or never
    there), False when libvirt could not end it (a busy QEMU, a lost connection)."""
    lv = libvirt_module()
    for attempt in range(tries):
        try:
            conn.lookupByName(name).destroy()
            return True
        except lv.libvirtError as exc:
            if exc.get_error_code() == lv.VIR_ERR_NO_DOMAIN:
                return True
            time.sleep(0.5 * (attempt + 1))
    return False


def recover_domains() -> list[str]:
    """Destroy every transient domain a dead run left, and delete its overlays."""
    out: list[str] = []
    folder = records_dir()
    if not folder.is_dir():
        return out
    for rec in sorted(folder.glob("*.json")):
        try:
            d = json.loads(rec.read_text())
        except (OSError, ValueError):
            rec.unlink(missing_ok=True)
            continue
        if _owner_alive(d):
            continue  # its run is still going
        try:
            conn = connect(str(d["uri"]))
        except DomainError:
            continue  # libvirtd down: keep the record for the next recover
        try:
            gone = destroy(conn, str(d["domain"]))
        finally:
            conn.close()
        if not gone:
            continue  # libvirt could not end it: keep the record for the next recover
        out.append(str(d["domain"]))
        overlays = Path(str(d["overlays"]))
        if overlays.parent == OVERLAY_ROOT:
            shutil.rmtree(overlays, ignore_errors=True)
        rec.unlink(missing_ok=True)
    return out


def _owner_alive(rec: dict[str, Any]) -> bool:
    """The run that wrote the record still lives (hugelab.identity: a reused pid, or a record
    from before a reboot, is not it); never this process's own."""
    return rec.get("pid") != os.getpid() and identity.recorded_alive(rec, prefix="")
