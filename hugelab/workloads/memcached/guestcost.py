"""What a memcached trial in a user's domain does in the guest beyond its load at the host's
rate, for the cost model (`run --dry-run`).

A trial in a user's domain (examples/memcached-domain.toml: the demo domain, Debian 12, 512 MiB,
TCG, through SSH) starts the guest's own memcached as a daemon (its directory made, its pid
file read until it listens: 3-3.5 s over SSH), runs memcslap beside it in the guest, reads the
server's smaps, stops it, undoes its changes, asks memcached -V (2-2.5 s) and destroys the
copy (about 2 s). memcslap -e 5000 -c 2 (5,000 keys set, then 2 x 5,000 gets) took about
10 s on a quiet host (4 trials in 141 s), 15.7 s at PSI cpu some 29%, 20-37 s with the host's
2 CPUs busy: 1,200 requests a second under TCG; KVM's figures not measured (no KVM here)."""

from __future__ import annotations

from hugelab.workloads.preview import GuestBuild

GUEST_FIXED_S = {"kvm": 3.0, "tcg": 7.0}  # beside the load, less load_seconds' 1 s
GUEST_OPS_PER_S = {"kvm": 15_000.0, "tcg": 1_200.0}  # memcslap against the guest's memcached


def guest_build(requests: int, host_s: float) -> GuestBuild:
    """The in-guest part of a trial that sends `requests` requests: its fixed seconds per
    accelerator hold the daemon's life and the requests at the guest's rate, less `host_s`,
    what the kind's own estimate (workload.load_seconds, at the host's rate) counts."""
    fixed = {accel: GUEST_FIXED_S[accel] + max(0.0, requests / GUEST_OPS_PER_S[accel] - host_s)
             for accel in GUEST_FIXED_S}
    return GuestBuild(f"memcached: started as a daemon, memcslap's {requests:,} requests at "
                      "the guest's rate", "", 0.0, fixed)
