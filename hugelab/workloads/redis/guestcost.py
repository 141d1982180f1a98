"""What a Redis trial in a user's domain does in the guest beyond its load at the host's rate,
for the cost model (`run --dry-run`): every trial starts the guest's own redis-server as a
daemon there (its directory made, its pid file and /proc/net/tcp read until it listens),
preloads the keyspace with redis-cli's EVAL loops, runs redis-benchmark beside it in the guest
(client and server on the guest's CPU), reads the server's smaps, stops it, undoes its
changes and asks redis-benchmark its version; the copy is destroyed after. Measured on the
demo domain (Debian 12, 512 MiB, TCG, through its guest agent), examples/redis-domain.toml
(10,000 keys preloaded, 2 x 20,000 requests, 4 clients), on a quiet host (PSI cpu some under
20% of the trial): 26-27 s a trial, 15-16 s of it the boot; the server's start about 2 s, the
preload 0.4-0.6 s, redis-benchmark 6.4-7.0 s (about 6,000 requests a second), the rest
(evidence, stop, undo, version, the copy destroyed) about 2 s. With the host's 2 CPUs busy
(PSI 40-75%) the same trial took 44-79 s, redis-benchmark 18-45 s: the estimate is a quiet
host's. KVM's figures are not measured (this host has none): near the host's own rates."""

from __future__ import annotations

from hugelab.workloads.preview import GuestBuild

# seconds every trial spends beside its load: the daemon started and stopped, its directory
# made and removed, its memory read, redis-benchmark --version, the copy destroyed
FIXED_S = {"kvm": 2.0, "tcg": 3.5}
# requests a second of redis-benchmark against the guest's own server, both in the guest
GUEST_RPS = {"kvm": 30_000.0, "tcg": 5_000.0}
# keys a second of the preload's EVAL loops inside the guest's server
GUEST_PRELOAD_PER_S = {"kvm": 200_000.0, "tcg": 20_000.0}


def guest_build(fill: int, requests: int, pipeline: int, host_s: float) -> GuestBuild:
    """The in-guest part of a trial in a user's domain that preloads `fill` keys and sends
    `requests` requests (all tests') `pipeline` a round trip: its fixed seconds per accelerator
    hold the daemon's life and the load at the guest's rate, less `host_s`, what the kind's own
    estimate (cost.load_seconds, at the host's rate) already counts."""
    fixed = {accel: FIXED_S[accel] + max(0.0, fill / GUEST_PRELOAD_PER_S[accel]
                                         + requests / (GUEST_RPS[accel] * pipeline) - host_s)
             for accel in FIXED_S}
    return GuestBuild(f"Redis: redis-server started as a daemon, {fill:,} keys preloaded, "
                      f"redis-benchmark's {requests:,} requests at the guest's rate",
                      "", 0.0, fixed)
