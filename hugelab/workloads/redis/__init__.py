"""Redis as a workload (`kind = "redis"`): redis-server on loopback under the arm's THP and
Redis's own `disable-thp`, loaded by redis-benchmark (or hugelab-reqmix, interleaved), over the
key-value servers' one life cycle (hugelab.workloads.serverkind). `workload.RedisBenchmark` is
the kind's class and `workload.KIND` its declaration, both named here too; the other modules
each do one job: `bench` (redis-benchmark's tests, argv, CSV and interleaved windows),
`control` (PING, SHUTDOWN and the server's argv as a daemon in a guest or a user's domain),
`rdb` (a user's RDB file: checked, copied, its keys read back, leftovers), `persist` (the
persistence settings, switches and private directory), `forkdriver` (BGSAVE / BGREWRITEAOF
during the load, and the latency probe), `forks` (what each save cost, from Redis's INFO),
`resp` (RESP and INFO over a socket), `preload` (every key SET before the load), `thp`
(Redis's disable-thp judged from its server's own memory), `cost` (a trial's load sized from
its table for the dry run; `guestcost` the part in a user's domain)."""

from hugelab.workloads.redis.workload import KIND, RedisBenchmark, judge, load_seconds, validate

__all__ = ["KIND", "RedisBenchmark", "judge", "load_seconds", "validate"]
