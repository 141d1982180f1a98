"""A server's private files kept between a run's trials (hugelab.workloads.filepool): kept only
inside `kept()`, handed out last kept first, each one left at the end dropped by its own
function, every drop run even when one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from hugelab.workloads import filepool


def test_outside_a_run_nothing_is_kept():
    dropped: list[Path] = []
    assert filepool.give("k", Path("/x"), dropped.append) is False
    assert filepool.take("k") is None and filepool.held() == 0 and dropped == []


def test_inside_a_run_the_last_kept_is_taken_first_per_key_and_the_rest_dropped_at_its_end():
    dropped: list[Path] = []
    with filepool.kept():
        assert filepool.take("a") is None
        for name in ("a1", "a2"):
            assert filepool.give("a", Path(name), dropped.append)
        assert filepool.give("b", Path("b1"), dropped.append)
        assert filepool.held() == 3
        assert filepool.take("a") == Path("a2") and filepool.take("a") == Path("a1")
        assert filepool.take("a") is None
        assert filepool.give("a", Path("a3"), dropped.append)
        assert dropped == []
    assert sorted(dropped) == [Path("a3"), Path("b1")]
    assert filepool.held() == 0 and filepool.give("a", Path("a4"), dropped.append) is False


def test_a_run_inside_a_run_shares_its_files_and_only_the_outer_end_drops_them():
    dropped: list[Path] = []
    with filepool.kept():
        with filepool.kept():
            filepool.give("a", Path("a1"), dropped.append)
        assert dropped == [] and filepool.take("a") == Path("a1")
        filepool.give("a", Path("a1"), dropped.append)
    assert dropped == [Path("a1")]


def test_every_directory_is_dropped_and_the_first_failure_raised_after():
    dropped: list[Path] = []

    def bad(path: Path) -> None:
        raise OSError(f"cannot remove {path}")

    with pytest.raises(OSError, match="cannot remove bad"):
        with filepool.kept():
            filepool.give("a", Path("bad"), bad)
            filepool.give("a", Path("good"), dropped.append)
    assert dropped == [Path("good")] and filepool.held() == 0
