/* hugelab-reqmix: one client that alternates short windows of requests across several
 * servers (one per arm) in a seeded random order and its mirror (ABBA), timing each window.
 * Shared declarations of the protocol modules, the network helpers and the runner. */
#ifndef REQMIX_H
#define REQMIX_H

#include <stddef.h>
#include <stdint.h>

#define RM_ERRLEN 512
#define RM_MAX_SERVERS 16

typedef struct { uint64_t s; } rm_rng;

uint64_t rm_next(rm_rng *r);
uint64_t rm_below(rm_rng *r, uint64_t n);
int64_t rm_range(rm_rng *r, int64_t lo, int64_t hi);
uint64_t rm_now_ns(void);
void rm_err(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct rm_opts {
    int clients;
    long window_ops, window_ms, warm_ops, windows;
    double duration_s;
    uint64_t seed;
    long keyspace, value_size;
    double set_ratio;
    int preload;
    long pg_scale;
    const char *pg_builtin, *pg_file;
    long tables, table_size, range_size;
} rm_opts;

/* One protocol: `name` is its --server prefix (before the ':') and its name in the report;
 * `setup` once per run (may be NULL), `open` once per connection, `op` one operation (its
 * count is what the server's own counters should show), `preload` the data an op reads (may
 * be NULL; returns the number of items written or -1). Errors fill err. A key-value protocol
 * is KV_PROTO(name, &codec) (kv.h): `kv` is its encode and reply, kv.c does the rest. */
struct kv_codec;
typedef struct rm_proto {
    const char *name;
    int (*setup)(const rm_opts *o, char *err);
    int (*open)(const struct rm_proto *p, const char *spec, const rm_opts *o, int client,
                void **conn, char *err);
    int (*op)(void *conn, rm_rng *rng, char *err);
    long (*preload)(void *conn, const rm_opts *o, char *err);
    void (*close)(void *conn);
    const struct kv_codec *kv;
} rm_proto;

/* Each protocol's module defines one; main.c's PROTOCOLS lists them (the one table). */
extern const rm_proto rm_redis, rm_memc, rm_http, rm_pg, rm_mysql;

/* A TCP connection with a buffered reader (redis and memcached). */
typedef struct rm_sock {
    int fd;
    size_t beg, end;
    char buf[65536];
} rm_sock;

int rm_connect(const char *hostport, rm_sock *s, char *err);
int rm_send(rm_sock *s, const char *data, size_t len, char *err);
int rm_line(rm_sock *s, char **line, size_t *len, char *err);
int rm_skip(rm_sock *s, size_t n, char *err);

/* Per-connection key and value helpers for the key-value protocols. */
int rm_key(char *out, size_t cap, long idx);
char *rm_value(long size);

#endif
