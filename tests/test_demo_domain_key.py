"""The demo domain under another state directory's key (a user's second state directory, or
every test's own): defined again for that key, its 1.3 GB of copies kept as they are; the
domain's kernel command line names the key of the state directory that defined it last."""

from __future__ import annotations

import pytest

from tests.vmhelpers import DOMAIN, libvirt_missing

pytestmark = [pytest.mark.vm, pytest.mark.slow]


def _key_blob(key) -> str:
    return (key.parent / f"{key.name}.pub").read_text().split()[1]


def _cmdline() -> str:
    from hugelab.vm.common.libvirtd import connect
    conn = connect("qemu:///system")
    try:
        xml = conn.lookupByName(DOMAIN).XMLDesc(0)
    finally:
        conn.close()
    return xml.split("<cmdline>", 1)[1].split("</cmdline>", 1)[0]


def test_another_state_directorys_key_redefines_the_domain_and_keeps_its_copies(tmp_path,
                                                                                monkeypatch):
    reason = libvirt_missing()
    if reason:
        pytest.fail(reason)  # a real component this test needs: never a silent skip
    from hugelab.vm.domains.demo_domain import define_image_domain, demo_key
    said: list[str] = []
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "a"))
    home = define_image_domain(DOMAIN, progress=said.append)
    key_a = demo_key()
    copies = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in home.iterdir()}
    assert _key_blob(key_a) in _cmdline()

    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "b"))
    said.clear()
    assert define_image_domain(DOMAIN, progress=said.append) == home
    key_b = demo_key()
    assert key_b != key_a and _key_blob(key_b) != _key_blob(key_a)
    cmdline = _cmdline()
    assert _key_blob(key_b) in cmdline and _key_blob(key_a) not in cmdline
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in home.iterdir()} == copies
    assert any("with another key: defined again for" in m and "copies kept" in m
               for m in said), said

    said.clear()
    define_image_domain(DOMAIN, progress=said.append)
    assert said == [f"domain '{DOMAIN}' is defined from this image and key: left as it is"]
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in home.iterdir()} == copies

    # an experiment still naming the first key (an example's path kept) is refused before any
    # host change, with the key the domain takes, where every boot would fail 300 s later
    import tomllib

    from hugelab.errors import HugelabError
    from hugelab.experiment.parse import parse_experiment
    from hugelab.vm.domains.domainresolve import resolve

    def arm(key):
        exp = parse_experiment(tomllib.loads(
            f'name = "k"\nbaseline = "a"\n[vm]\ndomain = "{DOMAIN}"\naccess = "ssh"\n'
            f'ssh_key = "{key}"\n[workload]\nkind = "sysbench"\n[[arms]]\nname = "a"\n'
            'backing = "4k"\nvm = { backing = "anon" }\n'))
        return exp.arms[0]

    with pytest.raises(HugelabError) as err:
        resolve(arm(key_a))
    assert "lets in over SSH only the key" in str(err.value) and str(key_a) in str(err.value)
    assert f'ssh_key = "{key_b}"' in (err.value.hint or ""), err.value.hint
    assert resolve(arm(key_b)).vm.ssh_key == str(key_b)
