"""memcached as a workload (`kind = "memcached"`): memcached on loopback with its own large-page
switch (-L) per arm, loaded by memcslap (or hugelab-reqmix, interleaved), over the key-value
servers' one life cycle (hugelab.workloads.serverkind). `workload.MemcachedBenchmark` is the
kind's class and `workload.KIND` its declaration, both named here too; `evidence` judges -L from
the server's own mappings, `guestcost` sizes a trial in a user's domain for the dry run,
`control` talks to the server outside memcslap (readiness, shutdown, its argv as a daemon)."""

from hugelab.workloads.memcached.control import daemon_argv
from hugelab.workloads.memcached.evidence import check_memcached, judge
from hugelab.workloads.memcached.workload import KIND, MemcachedBenchmark

__all__ = ["KIND", "MemcachedBenchmark", "check_memcached", "daemon_argv", "judge"]
