/* The windows: a seeded random order of the servers and its mirror per block (ABBA), the
 * orders balanced over each cycle of n blocks, each window run by every client thread in
 * lockstep on its own connection to that server. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run.h"

int rm_hist_index(uint64_t ns)
{
    /* 32 linear sub-buckets per power of two: about 3% resolution */
    if (ns < 32)
        return (int)ns;
    int msb = 63 - __builtin_clzll(ns);
    int idx = (msb - 4) * 32 + (int)((ns >> (msb - 5)) & 31);
    return idx < RM_HIST_BUCKETS ? idx : RM_HIST_BUCKETS - 1;
}

uint64_t rm_hist_value(int idx)
{
    /* the middle of the bucket */
    if (idx < 32)
        return (uint64_t)idx;
    int msb = idx / 32 + 4, sub = idx % 32;
    uint64_t lo = (1ULL << msb) + ((uint64_t)sub << (msb - 5));
    return lo + ((1ULL << (msb - 5)) >> 1);
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

rm_slot *rm_slot_at(rm_run *r, long w, int client)
{
    return &r->slots[w / RM_CHUNK][(w % RM_CHUNK) * r->o->clients + client];
}

rm_wmeta *rm_meta_at(rm_run *r, long w)
{
    return &r->meta[w / RM_CHUNK][w % RM_CHUNK];
}

static int ensure_chunk(rm_run *r, long w)
{
    long c = w / RM_CHUNK;
    if (c >= RM_MAX_CHUNKS)
        return -1;
    if (!r->slots[c]) {
        r->slots[c] = calloc((size_t)RM_CHUNK * (size_t)r->o->clients, sizeof(rm_slot));
        r->meta[c] = calloc(RM_CHUNK, sizeof(rm_wmeta));
    }
    return r->slots[c] && r->meta[c] ? 0 : -1;
}

static void shuffle(rm_rng *rng, int *a, int n)
{
    for (int i = 0; i < n; i++)
        a[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rm_below(rng, (uint64_t)i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Block b's order of the servers: the blocks come in cycles of n, each cycle the n rotations
 * of a random order in a random sequence, so every server leads (and, mirrored, closes) a
 * block, and holds each place, exactly once per cycle: no server is first more often than
 * another by chance (issue 39). */
static void block_order(rm_run *r, long b, int *perm)
{
    int n = r->nserv, k = (int)(b % n);
    if (k == 0) {
        shuffle(&r->sched, r->cyc_first, n);
        shuffle(&r->sched, r->cyc_rot, n);
    }
    for (int i = 0; i < n; i++)
        perm[i] = r->cyc_first[(i + r->cyc_rot[k]) % n];
}

/* Before window w (client 0 only): at a block's start, decide whether to stop, and lay out
 * the block: the block's order of the servers (block_order), then the same order reversed. */
static void plan(rm_run *r, long w)
{
    long per_block = 2L * r->nserv;
    if (w % per_block != 0)
        return;
    const rm_opts *o = r->o;
    /* by time: at least RM_MIN_BLOCKS whole blocks, however slow the machine (a stalled or
     * stolen second must not leave a trial with one block, too few for its estimate) */
    int done = o->windows > 0 ? w >= o->windows
                              : w >= RM_MIN_BLOCKS * per_block
                                    && (double)(rm_now_ns() - r->t_begin) >= o->duration_s * 1e9;
    if (done || ensure_chunk(r, w) != 0 || ensure_chunk(r, w + per_block - 1) != 0) {
        r->stop = 1;
        r->nwin = w;
        return;
    }
    int perm[RM_MAX_SERVERS];
    block_order(r, w / per_block, perm);
    for (long p = 0; p < per_block; p++) {
        rm_wmeta *m = rm_meta_at(r, w + p);
        m->arm = p < r->nserv ? perm[p] : perm[per_block - 1 - p];
        m->pos = (int)p;
        m->block = w / per_block;
    }
}

static void sync_all(rm_run *r)
{
    if (r->o->clients > 1)
        pthread_barrier_wait(&r->bar);
}

static void fail(rm_run *r, int client, int arm, const char *err)
{
    fprintf(stderr, "hugelab-reqmix: %s server %d (%s), client %d: %s\n",
            r->proto[arm]->name, arm, r->spec[arm], client, err);
    exit(3);
}

/* One window on one client: the warm-up ops, then the timed ones. */
static void window(rm_run *r, int t, long w, rm_rng *rng)
{
    const rm_opts *o = r->o;
    int arm = rm_meta_at(r, w)->arm;
    size_t cs = (size_t)t * (size_t)r->nserv + (size_t)arm;
    void *conn = r->conns[cs];
    const rm_proto *p = r->proto[arm];
    uint64_t *hist = r->hist + cs * RM_HIST_BUCKETS;
    char err[RM_ERRLEN];
    for (long i = 0; i < o->warm_ops; i++)
        if (p->op(conn, rng, err) != 0)
            fail(r, t, arm, err);
    if (o->warm_ops > 0)
        sync_all(r);
    uint64_t cpu0 = thread_cpu_ns(), start = rm_now_ns(), prev = start, ops = 0;
    uint64_t until = start + (uint64_t)o->window_ms * 1000000ULL;
    while (o->window_ops > 0 ? ops < (uint64_t)o->window_ops : prev < until) {
        if (p->op(conn, rng, err) != 0)
            fail(r, t, arm, err);
        uint64_t now = rm_now_ns();
        hist[rm_hist_index(now - prev)]++;
        prev = now;
        ops++;
    }
    rm_slot *s = rm_slot_at(r, w, t);
    s->ops = ops;
    s->start = start;
    s->end = prev;
    s->cpu = thread_cpu_ns() - cpu0;
    r->ops_total[cs] += ops + (uint64_t)o->warm_ops;
}

static void *client_main(void *arg)
{
    void **a = arg;
    rm_run *r = a[0];
    int t = (int)(intptr_t)a[1];
    rm_rng rng = {r->o->seed * 0x100000001b3ULL + (uint64_t)t + 1};
    for (long w = 0;; w++) {
        if (t == 0)
            plan(r, w);
        sync_all(r);
        if (r->stop)
            break;
        window(r, t, w, &rng);
    }
    return NULL;
}

int rm_execute(rm_run *r, char *err)
{
    int k = r->o->clients;
    pthread_t th[256];
    void *args[256][2];
    if (k > 1 && pthread_barrier_init(&r->bar, NULL, (unsigned)k) != 0) {
        rm_err(err, "cannot make a barrier for %d clients", k);
        return -1;
    }
    r->sched.s = r->o->seed;
    r->t_begin = rm_now_ns();
    for (int t = 0; t < k; t++) {
        args[t][0] = r;
        args[t][1] = (void *)(intptr_t)t;
        if (t > 0 && pthread_create(&th[t], NULL, client_main, args[t]) != 0) {
            rm_err(err, "cannot start client thread %d", t);
            exit(3);
        }
    }
    client_main(args[0]);
    for (int t = 1; t < k; t++)
        pthread_join(th[t], NULL);
    r->t_end = rm_now_ns();
    if (k > 1)
        pthread_barrier_destroy(&r->bar);
    return 0;
}

int rm_connect_all(rm_run *r, char *err)
{
    int k = r->o->clients, n = r->nserv;
    r->conns = calloc((size_t)k * (size_t)n, sizeof(void *));
    r->hist = calloc((size_t)k * (size_t)n * RM_HIST_BUCKETS, sizeof(uint64_t));
    r->ops_total = calloc((size_t)k * (size_t)n, sizeof(uint64_t));
    if (!r->conns || !r->hist || !r->ops_total) {
        rm_err(err, "out of memory");
        return -1;
    }
    char e[RM_ERRLEN];
    /* the servers connected and preloaded in a seeded random order, not the --server order
     * (the order hugelab started them in): the last one loaded is not always the last started */
    rm_rng crng = {r->o->seed ^ 0x6a09e667f3bcc908ULL};
    shuffle(&crng, r->connect_order, n);
    for (int i = 0; i < n; i++) {
        int s = r->connect_order[i];
        for (int t = 0; t < k; t++) {
            if (r->proto[s]->open(r->proto[s], r->spec[s], r->o, t, &r->conns[t * n + s], e) != 0) {
                rm_err(err, "%s server %d (%s): %s", r->proto[s]->name, s, r->spec[s], e);
                return -1;
            }
        }
        if (r->o->preload && r->proto[s]->preload) {
            r->preloaded[s] = r->proto[s]->preload(r->conns[s], r->o, e);
            if (r->preloaded[s] < 0) {
                rm_err(err, "%s server %d: preload: %s", r->proto[s]->name, s, e);
                return -1;
            }
        }
    }
    return 0;
}

void rm_close_all(rm_run *r)
{
    int k = r->o->clients, n = r->nserv;
    for (int i = 0; r->conns && i < k * n; i++)
        if (r->conns[i])
            r->proto[i % n]->close(r->conns[i]);
}
