/* The connection both key-value protocols use. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kv.h"

int kv_open(const char *spec, const rm_opts *o, void **conn, char *err)
{
    kv_conn *c = calloc(1, sizeof *c);
    if (!c) {
        rm_err(err, "out of memory");
        return -1;
    }
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

int kv_pick(kv_conn *c, rm_rng *rng, char *key, size_t cap, int *is_set)
{
    *is_set = rm_next(rng) < c->set_threshold;
    return rm_key(key, cap, (long)rm_below(rng, (uint64_t)c->keyspace));
}
