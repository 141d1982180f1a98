"""The guest layer made true the same way in every guest (hugelab.vm.common.guestapi
.apply_guest_layer): THP mode, and pools written (a user's domain) or reserved on the command
line (hugelab's own guests), each read back and refused when the guest kept fewer pages."""

from __future__ import annotations

import pytest

from hugelab.errors import VMError
from hugelab.vm.common.guestapi import GUEST_THP_ENABLED, apply_guest_layer
from hugelab.vm.common.spec import VmSpec

POOL_2M = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"


class Kernel:
    """A guest's sysfs as files; a pool keeps at most `room` pages, as a full guest would."""

    def __init__(self, room: int = 1 << 20, pool: int = 0) -> None:
        self.files = {POOL_2M: str(pool)}
        self.room = room

    def write_file(self, path: str, data: str, *, wait_s: float = 60.0) -> None:
        self.files[path] = str(min(int(data), self.room)) if path == POOL_2M else data

    def read_file(self, path: str, *, wait_s: float = 60.0) -> str:
        if path not in self.files:
            raise VMError(f"no {path}")
        return self.files[path]


def test_a_users_domain_gets_its_mode_and_pool_written():
    k = Kernel()
    apply_guest_layer(k, VmSpec(guest_thp="never", guest_hugepages_2m=16), write_pools=True)
    assert k.files[GUEST_THP_ENABLED] == "never" and k.files[POOL_2M] == "16"


def test_a_pool_the_guest_could_not_fill_is_refused_in_either_guest():
    with pytest.raises(VMError, match="reserved 5 of the 16"):
        apply_guest_layer(Kernel(room=5), VmSpec(guest_hugepages_2m=16), write_pools=True)
    with pytest.raises(VMError, match="reserved 3 of the 16"):  # the command line's reservation
        apply_guest_layer(Kernel(pool=3), VmSpec(guest_hugepages_2m=16), write_pools=False)


def test_own_guests_pools_are_not_written_only_checked():
    k = Kernel(pool=16)
    apply_guest_layer(k, VmSpec(guest_hugepages_2m=16), write_pools=False)
    assert k.files == {POOL_2M: "16"}  # no THP mode asked: nothing written at all
