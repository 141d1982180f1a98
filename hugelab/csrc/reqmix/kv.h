/* What the Redis and memcached modules share: one connection and its request buffer. */
#ifndef REQMIX_KV_H
#define REQMIX_KV_H

#include "reqmix.h"

typedef struct kv_conn {
    rm_sock sock;
    long keyspace, value_size;
    uint64_t set_threshold; /* an op is a set when rm_next() < this */
    char *value, *req;
    size_t req_cap;
} kv_conn;

int kv_open(const char *spec, const rm_opts *o, void **conn, char *err);
void kv_close(void *conn);
/* Pick the next op: its key into `key` (length returned), whether it is a set into *is_set. */
int kv_pick(kv_conn *c, rm_rng *rng, char *key, size_t cap, int *is_set);

#endif
