/* The runner: k threads, each with one connection per server, alternating windows. */
#ifndef REQMIX_RUN_H
#define REQMIX_RUN_H

#include <pthread.h>

#include "reqmix.h"

#define RM_CHUNK 4096
#define RM_MAX_CHUNKS 65536
#define RM_HIST_BUCKETS 1216
#define RM_MIN_BLOCKS 2 /* by --duration-s: at least this many blocks (a trial estimates from 2;
                          * hugelab flags one with fewer than 6: trial/judge.py) */

typedef struct { uint64_t ops, start, end, cpu; } rm_slot;
typedef struct { int arm, pos; long block; } rm_wmeta;

typedef struct rm_run {
    const rm_opts *o;
    int nserv;
    const rm_proto *proto[RM_MAX_SERVERS];
    const char *spec[RM_MAX_SERVERS];
    void **conns;          /* [client * nserv + server] */
    uint64_t *hist;        /* [(client * nserv + server) * RM_HIST_BUCKETS] */
    uint64_t *ops_total;   /* [client * nserv + server], warm-up ops included */
    long preloaded[RM_MAX_SERVERS];
    rm_slot *slots[RM_MAX_CHUNKS];    /* window w, client t: slots[w / CHUNK][w % CHUNK * k + t] */
    rm_wmeta *meta[RM_MAX_CHUNKS];
    pthread_barrier_t bar;
    int stop;
    long nwin;
    rm_rng sched;
    int cyc_first[RM_MAX_SERVERS];   /* this cycle of blocks: a random order */
    int cyc_rot[RM_MAX_SERVERS];     /* and the sequence of its rotations */
    int connect_order[RM_MAX_SERVERS]; /* servers connected and preloaded in this order */
    uint64_t t_begin, t_end;
} rm_run;

int rm_hist_index(uint64_t ns);
uint64_t rm_hist_value(int idx);
int rm_connect_all(rm_run *r, char *err);
void rm_close_all(rm_run *r);
int rm_execute(rm_run *r, char *err);
rm_slot *rm_slot_at(rm_run *r, long w, int client);
rm_wmeta *rm_meta_at(rm_run *r, long w);

#endif
