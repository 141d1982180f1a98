/* hugelab-mem --interleave: one buffer per backing, measured in alternating windows
 * (each round a random order of the buffers, then its mirror), so drift hits all alike. */
#include "hugelab-mem.h"

#include <stdlib.h>
#include <string.h>

/* perm = a random order of 0..nb-1 (Fisher-Yates from the stream *st). */
static void shuffle(unsigned *perm, unsigned nb, uint64_t *st)
{
    for (unsigned i = 0; i < nb; i++)
        perm[i] = i;
    for (unsigned i = nb - 1; i > 0; i--) {
        unsigned j = (unsigned)bounded(splitmix64(st), i + 1);
        unsigned tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp;
    }
}

/* Runs buffer b's workload until `deadline`; returns the seconds measured. */
static double run_window(const struct config *cfg, struct ibuf *b, double deadline,
                         uint64_t *ops)
{
    uint64_t n = 0;
    double t0 = now_s(), t;
    if (cfg->workload == W_CHASE) {
        void **p = b->p;
        do {
            p = chase_chunk(p);
            n += CHUNK_LOADS;
        } while ((t = now_s()) < deadline && !g_sigint);
        b->p = p;
    } else {
        const uint64_t *words = (const uint64_t *)b->m.base;
        uint64_t nwords = cfg->size / 8, sum = b->sum, rng = b->rng;
        do {
            sum += random_chunk(words, nwords, &rng);
            n += CHUNK_LOADS;
        } while ((t = now_s()) < deadline && !g_sigint);
        b->sum = sum;
        b->rng = rng;
    }
    *ops = n;
    return t - t0;
}

/* Faults the buffers in turn, 2 MiB of each at a time, in a random order per turn: the
 * kernel hands them physical memory from the same places, so no buffer gets the better
 * part of memory by being populated first (in a VM, regions of guest-physical memory can
 * differ by 10% in latency). */
static void populate_interleaved(struct ibuf *b, unsigned nb, uint64_t seed)
{
    size_t len = 0;
    unsigned perm[MAX_INTERLEAVE];
    for (unsigned i = 0; i < nb; i++)
        len = b[i].m.len > len ? b[i].m.len : len;
    uint64_t st = seed ^ 0x9E3779B97F4A7C15ULL;
    for (size_t off = 0; off < len; off += PMD_SIZE) {
        shuffle(perm, nb, &st);
        for (unsigned i = 0; i < nb; i++) {
            struct mapping *m = &b[perm[i]].m;
            if (off < m->len)
                populate(m->base + off, off + PMD_SIZE <= m->len ? PMD_SIZE : m->len - off);
        }
    }
}

static void setup_ibuf(const struct config *cfg, enum backing bk, struct ibuf *b)
{
    double t0 = now_s();
    if (bk == B_COLLAPSE) {
        read_evidence(b->m.base, &b->ev_before_collapse);
        collapse_setup(&b->m, &b->collapse);
    }
    /* the same seed for every buffer: A/A buffers walk the same permutation */
    if (cfg->workload == W_CHASE) {
        struct layout lay;
        dense_layout(cfg->size, &lay); /* --touch-fraction does not interleave */
        build_chase(b->m.base, &lay, cfg->stride, cfg->seed);
    }
    b->p = (void **)b->m.base;
    uint64_t st = cfg->seed;
    b->rng = splitmix64(&st) | 1;
    read_evidence(b->m.base, &b->ev_setup);
    folio_census(b->m.base, b->m.len, &b->census);
    b->setup = now_s() - t0;
    check_setup_interrupt();
}

/* Maps, populates and sets up every buffer; each one's setup_s shares the populate time. */
static void setup_interleaved(const struct config *cfg, struct ibuf *b, size_t max_win)
{
    unsigned nb = cfg->n_inter;
    double t_map = now_s();
    for (unsigned i = 0; i < nb; i++) {
        b[i].win_ns = calloc(max_win, sizeof(double));
        if (!b[i].win_ns)
            die(1, "out of memory");
        map_buffer(cfg->inter[i], cfg->inter_name[i], cfg->size, &b[i].m);
    }
    populate_interleaved(b, nb, cfg->seed);
    double populated = (now_s() - t_map) / nb;
    for (unsigned i = 0; i < nb; i++) {
        setup_ibuf(cfg, cfg->inter[i], &b[i]);
        b[i].setup += populated;
    }
}

/* One window of buffer b: the warm-up (run, not measured), then the measured part. */
static void measure_window(const struct config *cfg, struct ibuf *b)
{
    uint64_t ops;
    if (cfg->warmup > 0.0) /* after the switch: run, do not measure */
        run_window(cfg, b, now_s() + cfg->warmup, &ops);
    double secs = run_window(cfg, b, now_s() + cfg->window, &ops);
    b->win_ns[b->n_win++] = secs * 1e9 / (double)ops;
    b->time += secs;
    b->ops += ops;
}

/* Rounds: a random order of the buffers, then its mirror (ABBA...), until the
 * duration is spent; only whole rounds run, so every buffer has as many windows. */
static void run_rounds(const struct config *cfg, struct ibuf *b, size_t max_win,
                       struct rounds *r)
{
    unsigned nb = cfg->n_inter;
    uint64_t st = cfg->seed ^ 0xA5A5A5A5DEADBEEFULL;
    unsigned perm[MAX_INTERLEAVE];
    double t_start = now_s(), t_end = t_start + cfg->duration;
    r->n_order = 0;
    while (!g_sigint) {
        double round = 2.0 * nb * (cfg->window + cfg->warmup);
        if (r->n_order && now_s() + round > t_end)
            break;
        if (r->n_order + 2 * nb > max_win)
            break;
        shuffle(perm, nb, &st);
        for (unsigned half = 0; half < 2; half++) {
            for (unsigned i = 0; i < nb; i++) {
                unsigned k = half ? perm[nb - 1 - i] : perm[i];
                measure_window(cfg, &b[k]);
                r->order[r->n_order++] = k;
            }
        }
    }
    r->wall = now_s() - t_start;
}

int run_interleaved(const struct config *cfg)
{
    unsigned nb = cfg->n_inter;
    struct ibuf b[MAX_INTERLEAVE];
    struct rounds r;
    memset(b, 0, sizeof b);
    size_t max_win = (size_t)(cfg->duration / cfg->window) + 4 * nb + 8;
    r.order = calloc(max_win, sizeof *r.order);
    if (!r.order)
        die(1, "out of memory");
    setup_interleaved(cfg, b, max_win);
    run_rounds(cfg, b, max_win, &r);
    for (unsigned i = 0; i < nb; i++)
        read_evidence(b[i].m.base, &b[i].ev_end);
    print_interleaved(cfg, b, &r);
    for (unsigned i = 0; i < nb; i++) {
        unmap_buffer(&b[i].m);
        free(b[i].win_ns);
    }
    free(r.order);
    return g_sigint ? 130 : 0;
}
