/* Redis over RESP: GET and SET of `--keyspace` keys with `--value-size` byte values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

static size_t encode(kv_conn *c, char *out, const char *key, int klen, int is_set)
{
    if (!is_set)
        return (size_t)sprintf(out, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", klen, key);
    size_t n = (size_t)sprintf(out, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%ld\r\n", klen, key,
                               c->value_size);
    memcpy(out + n, c->value, (size_t)c->value_size);
    memcpy(out + n + (size_t)c->value_size, "\r\n", 2);
    return n + (size_t)c->value_size + 2;
}

/* Read one reply: +OK, a bulk string ($-1 for a missing key), or an error. */
static int reply(kv_conn *c, char *err)
{
    char *line;
    size_t len;
    if (rm_line(&c->sock, &line, &len, err) != 0)
        return -1;
    if (len > 0 && line[0] == '+')
        return 0;
    if (len > 0 && line[0] == '$') {
        long n = strtol(line + 1, NULL, 10);
        return n < 0 ? 0 : rm_skip(&c->sock, (size_t)n + 2, err);
    }
    rm_err(err, "unexpected redis reply: %.200s", line);
    return -1;
}

static int redis_op(void *conn, rm_rng *rng, char *err)
{
    kv_conn *c = conn;
    char key[64];
    int is_set, klen = kv_pick(c, rng, key, sizeof key, &is_set);
    size_t n = encode(c, c->req, key, klen, is_set);
    if (rm_send(&c->sock, c->req, n, err) != 0)
        return -1;
    return reply(c, err);
}

/* SET every key once, 256 requests per round trip. */
static long redis_preload(void *conn, const rm_opts *o, char *err)
{
    kv_conn *c = conn;
    char key[64];
    for (long i = 0; i < o->keyspace; i += 256) {
        long batch = o->keyspace - i < 256 ? o->keyspace - i : 256;
        size_t n = 0;
        for (long j = 0; j < batch; j++) {
            int klen = rm_key(key, sizeof key, i + j);
            n += encode(c, c->req + n, key, klen, 1);
        }
        if (rm_send(&c->sock, c->req, n, err) != 0)
            return -1;
        for (long j = 0; j < batch; j++)
            if (reply(c, err) != 0)
                return -1;
    }
    return o->keyspace;
}

static int redis_open(const char *spec, const rm_opts *o, int client, void **conn, char *err)
{
    (void)client;
    return kv_open(spec, o, conn, err);
}

const rm_proto rm_redis = {"redis", NULL, redis_open, redis_op, redis_preload, kv_close};
