/* The key-value protocols' shared part: one connection with its request buffer, the GET/SET
 * loop (pick a key and whether it is a set, encode, send, read the reply) and the preload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv.h"

int kv_open(const rm_proto *p, const char *spec, const rm_opts *o, int client, void **conn,
            char *err)
{
    (void)client;
    kv_conn *c = calloc(1, sizeof *c);
    if (!c) {
        rm_err(err, "out of memory");
        return -1;
    }
    c->codec = p->kv;
    c->keyspace = o->keyspace;
    c->value_size = o->value_size;
    double r = o->set_ratio < 0 ? 0 : o->set_ratio > 1 ? 1 : o->set_ratio;
    c->set_threshold = r >= 1 ? UINT64_MAX : (uint64_t)(r * 18446744073709551616.0);
    c->value = rm_value(o->value_size);
    c->req_cap = (size_t)o->value_size * 256 + 65536;
    c->req = malloc(c->req_cap);
    if (!c->value || !c->req || rm_connect(spec, &c->sock, err) != 0) {
        if (!c->value || !c->req)
            rm_err(err, "out of memory");
        free(c->value);
        free(c->req);
        free(c);
        return -1;
    }
    *conn = c;
    return 0;
}

void kv_close(void *conn)
{
    kv_conn *c = conn;
    close(c->sock.fd);
    free(c->value);
    free(c->req);
    free(c);
}

size_t kv_set_value(const kv_conn *c, char *out, size_t n)
{
    memcpy(out + n, c->value, (size_t)c->value_size);
    memcpy(out + n + (size_t)c->value_size, "\r\n", 2);
    return n + (size_t)c->value_size + 2;
}

/* One op: a SET with probability --set-ratio, else a GET, of a uniformly drawn key. */
int kv_op(void *conn, rm_rng *rng, char *err)
{
    kv_conn *c = conn;
    char key[64];
    int is_set = rm_next(rng) < c->set_threshold;
    int klen = rm_key(key, sizeof key, (long)rm_below(rng, (uint64_t)c->keyspace));
    size_t n = c->codec->encode(c, c->req, key, klen, is_set);
    if (rm_send(&c->sock, c->req, n, err) != 0)
        return -1;
    return c->codec->reply(c, err);
}

/* SET every key once, 256 requests per round trip. */
long kv_preload(void *conn, const rm_opts *o, char *err)
{
    kv_conn *c = conn;
    char key[64];
    for (long i = 0; i < o->keyspace; i += 256) {
        long batch = o->keyspace - i < 256 ? o->keyspace - i : 256;
        size_t n = 0;
        for (long j = 0; j < batch; j++) {
            int klen = rm_key(key, sizeof key, i + j);
            n += c->codec->encode(c, c->req + n, key, klen, 1);
        }
        if (rm_send(&c->sock, c->req, n, err) != 0)
            return -1;
        for (long j = 0; j < batch; j++)
            if (c->codec->reply(c, err) != 0)
                return -1;
    }
    return o->keyspace;
}
