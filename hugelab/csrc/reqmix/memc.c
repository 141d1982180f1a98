/* memcached's text protocol: get and set of `--keyspace` keys with `--value-size` byte
 * values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

static size_t encode(kv_conn *c, char *out, const char *key, int is_set)
{
    if (!is_set)
        return (size_t)sprintf(out, "get %s\r\n", key);
    size_t n = (size_t)sprintf(out, "set %s 0 0 %ld\r\n", key, c->value_size);
    memcpy(out + n, c->value, (size_t)c->value_size);
    memcpy(out + n + (size_t)c->value_size, "\r\n", 2);
    return n + (size_t)c->value_size + 2;
}

/* STORED for a set; for a get, VALUE lines with their data until END. */
static int reply(kv_conn *c, char *err)
{
    char *line;
    size_t len;
    for (;;) {
        if (rm_line(&c->sock, &line, &len, err) != 0)
            return -1;
        if (strcmp(line, "STORED") == 0 || strcmp(line, "END") == 0)
            return 0;
        if (strncmp(line, "VALUE ", 6) != 0) {
            rm_err(err, "unexpected memcached reply: %.200s", line);
            return -1;
        }
        char *last = strrchr(line, ' ');
        long bytes = strtol(last + 1, NULL, 10);
        if (rm_skip(&c->sock, (size_t)bytes + 2, err) != 0)
            return -1;
    }
}

static int memc_op(void *conn, rm_rng *rng, char *err)
{
    kv_conn *c = conn;
    char key[64];
    int is_set;
    kv_pick(c, rng, key, sizeof key, &is_set);
    size_t n = encode(c, c->req, key, is_set);
    if (rm_send(&c->sock, c->req, n, err) != 0)
        return -1;
    return reply(c, err);
}

/* set every key once, 256 requests per round trip. */
static long memc_preload(void *conn, const rm_opts *o, char *err)
{
    kv_conn *c = conn;
    char key[64];
    for (long i = 0; i < o->keyspace; i += 256) {
        long batch = o->keyspace - i < 256 ? o->keyspace - i : 256;
        size_t n = 0;
        for (long j = 0; j < batch; j++) {
            rm_key(key, sizeof key, i + j);
            n += encode(c, c->req + n, key, 1);
        }
        if (rm_send(&c->sock, c->req, n, err) != 0)
            return -1;
        for (long j = 0; j < batch; j++)
            if (reply(c, err) != 0)
                return -1;
    }
    return o->keyspace;
}

static int memc_open(const char *spec, const rm_opts *o, int client, void **conn, char *err)
{
    (void)client;
    return kv_open(spec, o, conn, err);
}

const rm_proto rm_memc = {"memcached", NULL, memc_open, memc_op, memc_preload, kv_close};
