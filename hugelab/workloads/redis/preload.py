"""A redis-server's keys written before the load (`preload = true`): every key of the
keyspace, the ones redis-benchmark's GETs find, SET by a Lua loop inside the server."""

from __future__ import annotations

from hugelab import proc
from hugelab.errors import WorkloadError
from hugelab.workloads.base import Target
from hugelab.workloads.serverside import LOOPBACK

# server-side: SET key:%012d (redis-benchmark's keys) to `size` bytes for keys first..first+n-1
PRELOAD_LUA = ("local first, n = tonumber(ARGV[1]), tonumber(ARGV[2]) "
               "local v = string.rep('x', tonumber(ARGV[3])) "
               "for i = first, first + n - 1 do redis.call('SET', string.format('key:%012d', i), v) "
               "end return n")
PRELOAD_CHUNK = 100_000  # keys per script call: the server answers others between calls


def preload_argvs(cli: str, port: int, keyspace: int, size: int) -> list[list[str]]:
    """redis-cli calls that write every key `key:%012d` of the keyspace, `size` bytes each, by
    a Lua loop inside the server: run where the load's client runs (the host, or inside the
    guest of a user's domain, whose port the host cannot reach), in seconds even under TCG
    where a pipelined client took minutes."""
    return [[cli, "-h", LOOPBACK, "-p", str(port), "EVAL", PRELOAD_LUA, "0", str(first),
             str(min(PRELOAD_CHUNK, keyspace - first)), str(size)]
            for first in range(0, keyspace, PRELOAD_CHUNK)]


def preload(target: Target | None, cli: str, port: int, keyspace: int, size: int) -> None:
    """Every key of the keyspace SET before the load (`preload_argvs`), each call checked by
    the count it answers; on `target` (None: here, on the host)."""
    for argv in preload_argvs(cli, port, keyspace, size):
        if target is None:
            cp = proc.run(argv, check=False, timeout=600)
            code, out, err = cp.returncode, cp.stdout, cp.stderr
        else:
            r = target.exec(argv, timeout=600)
            code, out, err = r.returncode, r.stdout, r.stderr
        if code != 0 or out.strip().split()[-1:] != [argv[-2]]:
            raise WorkloadError(f"redis-server did not preload its keys: {argv[-2]} SETs "
                                f"answered {(out + err).strip()[:200]!r}")
