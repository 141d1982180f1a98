"""docs/kinds.md is generated from the kinds' declarations (issue 40 item 2): every key an
experiment file may set, per kind, with its type, default, unit and what it does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from hugelab.workloads import keydoc
from hugelab.workloads.kind import SERVER_PORT, Key, key, keys_of, timeout
from hugelab.workloads.registry import kinds

ROOT = Path(__file__).resolve().parents[1]


def test_kinds_reference_is_up_to_date():
    assert (ROOT / "docs" / "kinds.md").read_text() == keydoc.render(), (
        "docs/kinds.md is stale: run `.venv/bin/python -m hugelab.workloads.keydoc > "
        "docs/kinds.md`")


@pytest.mark.parametrize("name", sorted(kinds()))
def test_every_key_a_file_may_set_is_declared_once_with_what_it_does(name):
    kind = kinds()[name]
    declared = [k.name for k in kind.keys]
    assert sorted(declared) == sorted(keydoc.fields(kind)), \
        f"{name}: declared keys differ from the workload's fields"
    assert len(set(declared)) == len(declared)
    assert all(k.doc.strip() for k in kind.keys)


def test_the_page_shows_type_default_and_unit():
    text = keydoc.render()
    assert "- `keyspace` (integer (optional), default `1,000,000`, in keys): " in text
    assert "- `data_size` (integer, default `100`, in bytes): " in text
    assert "- `scale` (integer, default `10`): " in text
    assert all(f"## {name}\n" in text for name in kinds())


def test_keys_come_from_the_fields_in_their_order_and_a_field_without_one_is_refused():
    @dataclass(frozen=True)
    class Said:
        size: int = key(1, "how big", unit="bytes")
        port: int | None = key(None, SERVER_PORT)
        process_thp: str | None = None  # INTERNAL: the arm's
        timeout_s: float = key(1.0, timeout("a run"))

    assert keys_of(Said) == (Key("size", "bytes", "how big"), SERVER_PORT,
                             Key("timeout_s", "s", "the longest a run may take"))

    @dataclass(frozen=True)
    class Unsaid:
        size: int = key(1, "how big")
        seed: int = 0

    with pytest.raises(TypeError, match="Unsaid.seed: not declared"):
        keys_of(Unsaid)

    @dataclass(frozen=True)
    class Misnamed:
        bind: int | None = key(None, SERVER_PORT)

    with pytest.raises(TypeError, match="Misnamed.bind: declared as key 'port'"):
        keys_of(Misnamed)


def test_app_is_said_to_be_an_arms_key_and_a_workload_table_refuses_it():
    """The page said `app` was a [workload] key, where a [workload] table refuses it: now it
    says each arm sets it, and lists the settings a kind knows."""
    from hugelab.errors import ExperimentError
    from hugelab.workloads.registry import build_workload
    text = keydoc.render()
    assert "- `app` (table, default `{}`, set by each arm, not in `[workload]`): Redis's own " \
        in text
    assert "Settings: `large_pages` (true or false); `memory_mb` (an integer); `threads` (an " \
        "integer)." in text
    with pytest.raises(ExperimentError, match="unknown key 'app'"):
        build_workload("redis", {"app": {"disable-thp": "no"}})


@pytest.mark.parametrize("name", sorted(kinds()))
def test_a_workload_table_takes_exactly_the_keys_the_page_lists_for_it(name):
    """One list of what a file may not set (kind.INTERNAL, kind.ARM_KEYS): a key hugelab keeps
    for itself (postgres' `domain_arm`) is refused, and every listed key but `app` is taken."""
    from hugelab.errors import ExperimentError
    from hugelab.workloads.kind import INTERNAL
    from hugelab.workloads.registry import _fields
    taken = set(_fields(kinds()[name].workload))
    assert taken == set(keydoc.fields(kinds()[name])) - {"app"}
    assert not taken & INTERNAL
    if "domain_arm" in {f for f in kinds()[name].workload.__dataclass_fields__}:
        with pytest.raises(ExperimentError, match="unknown key 'domain_arm'"):
            from hugelab.workloads.registry import build_workload
            build_workload(name, {"domain_arm": True})
