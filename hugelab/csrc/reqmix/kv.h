/* The key-value protocols (Redis, memcached, HTTP): kv.c owns the connection, the GET/SET
 * loop and the preload; a protocol supplies only how one request is encoded and how its reply
 * is read (a kv_codec), and registers as KV_PROTO(name, &codec) in the protocol table (main.c). */
#ifndef REQMIX_KV_H
#define REQMIX_KV_H

#include "reqmix.h"

typedef struct kv_conn {
    rm_sock sock;
    const struct kv_codec *codec;
    long keyspace, value_size;
    uint64_t set_threshold; /* an op is a set when rm_next() < this */
    char *value, *req;
    size_t req_cap;
} kv_conn;

typedef struct kv_codec {
    /* Write the GET (or, if is_set, the SET of c->value) of `key` (klen bytes) at `out`;
     * return its length. */
    size_t (*encode)(const kv_conn *c, char *out, const char *key, int klen, int is_set);
    /* Read one reply from c->sock: 0, or -1 with err filled. */
    int (*reply)(kv_conn *c, char *err);
} kv_codec;

int kv_open(const rm_proto *p, const char *spec, const rm_opts *o, int client, void **conn,
            char *err);
int kv_op(void *conn, rm_rng *rng, char *err);
long kv_preload(void *conn, const rm_opts *o, char *err);
void kv_close(void *conn);
/* End a SET whose header (n bytes) is at `out`: c->value, then CRLF, as Redis and memcached
 * send it; return the whole request's length. */
size_t kv_set_value(const kv_conn *c, char *out, size_t n);

#define KV_PROTO(name, codec) {(name), NULL, kv_open, kv_op, kv_preload, kv_close, (codec)}

#endif
