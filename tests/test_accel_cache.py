"""The KVM probe's answer kept on disk: reused for the same kernel, QEMU, /dev/kvm and boot,
probed again when any of them changes, never trusted when unreadable (a fake boot counts the
probes; no guest starts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hugelab.vm.own import accel


@pytest.fixture
def probes(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(accel, "kvm_openable", lambda dev="/dev/kvm": None)
    accel.clear_cache()
    calls: list[Path] = []

    def boot(kernel: Path, qemu: str, timeout: float) -> str | None:
        calls.append(kernel)
        return "KVM probe failed: the guest agent did not answer within 30s"

    yield calls, boot
    accel.clear_cache()


def _kernel(tmp_path: Path, content: bytes) -> Path:
    k = tmp_path / "vmlinuz"
    k.write_bytes(content)
    return k


def test_same_kernel_and_boot_probe_once_across_processes(tmp_path, probes):
    calls, boot = probes
    k = _kernel(tmp_path, b"kernel one")
    assert accel.probe_accel(k, boot=boot, qemu="sh") == "tcg"
    accel.clear_cache()  # as a second process would start
    assert accel.probe_accel(k, boot=boot, qemu="sh") == "tcg"
    assert len(calls) == 1
    reason = accel.probe_reason(k, qemu="sh") or ""
    assert reason.startswith("KVM probe failed") and "cached" in reason


def test_a_changed_kernel_qemu_or_kvm_state_probes_again(tmp_path, probes, monkeypatch):
    calls, boot = probes
    k = _kernel(tmp_path, b"kernel one")
    accel.probe_accel(k, boot=boot, qemu="sh")
    accel.clear_cache()
    k.write_bytes(b"kernel two")  # same path, new content
    accel.probe_accel(k, boot=boot, qemu="sh")
    accel.clear_cache()
    accel.probe_accel(k, boot=boot, qemu="true")  # another QEMU binary
    accel.clear_cache()
    monkeypatch.setattr(accel, "kvm_openable", lambda dev="/dev/kvm": "/dev/kvm: gone")
    assert accel.probe_accel(k, boot=boot, qemu="true") == "tcg"  # no boot: /dev/kvm says
    assert len(calls) == 3


def test_a_damaged_record_is_probed_again_and_rewritten(tmp_path, probes):
    calls, boot = probes
    k = _kernel(tmp_path, b"kernel one")
    accel.probe_accel(k, boot=boot, qemu="sh")
    (rec,) = (tmp_path / "cache" / "accel").glob("*.json")
    rec.write_text('{"accel": "quantum"}')
    accel.clear_cache()
    assert accel.probe_accel(k, boot=boot, qemu="sh") == "tcg" and len(calls) == 2
    assert json.loads(rec.read_text())["accel"] == "tcg"
    assert (tmp_path / "cache" / "accel").stat().st_mode & 0o777 == 0o700


def test_an_unreadable_kernel_is_probed_and_not_kept(tmp_path, probes):
    calls, boot = probes
    missing = tmp_path / "no-such-vmlinuz"
    accel.probe_accel(missing, boot=boot, qemu="sh")
    assert len(calls) == 1 and not (tmp_path / "cache" / "accel").exists()
