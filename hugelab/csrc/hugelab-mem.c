/*
 * hugelab-mem: a small memory micro-benchmark whose results are sensitive to the
 * page size backing its buffer.  It maps one buffer with a chosen backing (4k,
 * THP, hugetlb 2 MiB / 1 GiB, multi-size THP, THP by MADV_COLLAPSE, shmem THP),
 * proves the backing through /proc/self/smaps, runs one workload for a fixed
 * duration, and prints ONE JSON object on stdout.
 *
 * mthp-<size> maps like thp (MADV_HUGEPAGE); which folio size the kernel gives is
 * decided by the host's per-size knobs, which hugelab sets for the arm.  The size is
 * any power of two from 8K (written 16K, 64K, 1M: as hugepages-<N>kB names it);
 * which sizes exist is the kernel's business, not this program's.
 * thp-collapse populates in 4 KiB pages (MADV_NOHUGEPAGE), then MADV_HUGEPAGE and
 * MADV_COLLAPSE over the buffer; the collapse's time and result are reported apart.
 * shmem-thp maps a memfd MAP_SHARED with MADV_HUGEPAGE (shmem_enabled 'advise').
 * --touch-fraction f writes only the first ceil(f*512) 4 KiB pages of each 2 MiB region
 * and the workload visits only those; the JSON's "layout" says what each page size
 * should then hold resident.
 *
 * This file holds main() and the single-buffer run; hugelab-mem.h lists the other parts.
 * Build: cc -O2 -Wall -Wextra -Werror -static -pthread hugelab-mem*.c -o hugelab-mem
 * Static so the same binary runs on the host and inside guests.
 *
 * Exit codes: 0 ok, 1 runtime failure, 2 bad arguments, 3 hugetlb mapping failed
 * (pool too small), 130 interrupted by SIGINT during setup.
 */
#include "hugelab-mem.h"

#include <stdlib.h>
#include <string.h>

/* populate: one untimed map+touch proves the backing; the timed loop maps its own. */
static void setup_populate(const struct config *cfg, struct outcome *o)
{
    struct mapping m = {0};
    size_t len = round_up(cfg->size / cfg->threads, BASE_PAGE);
    map_buffer(cfg->backing, cfg->name, len, &m);
    populate(m.base, len);
    if (cfg->backing == B_COLLAPSE) {
        read_evidence(m.base, &o->ev_before_collapse);
        collapse_setup(&m, &o->collapse);
    }
    read_evidence(m.base, &o->ev_setup);
    folio_census(m.base, len, &o->census);
    unmap_buffer(&m);
}

/* The other workloads: the buffer mapped, touched (collapsed), linked for chase. */
static void setup_buffer(const struct config *cfg, struct mapping *m, struct outcome *o)
{
    struct layout lay;
    buffer_layout(cfg, &lay);
    if (cfg->sparse) { /* whole 2 MiB regions, their first pages written */
        map_regions(cfg->backing, cfg->name, cfg->size, m);
        populate_layout(m->base, &lay);
    } else {
        map_buffer(cfg->backing, cfg->name, cfg->size, m);
        populate(m->base, m->len);
    }
    if (cfg->backing == B_COLLAPSE) {
        read_evidence(m->base, &o->ev_before_collapse);
        collapse_setup(m, &o->collapse);
    }
    if (cfg->workload == W_CHASE)
        build_chase(m->base, &lay, cfg->stride, cfg->seed);
    read_evidence(m->base, &o->ev_setup);
    folio_census(m->base, m->len, &o->census);
}

static int run_single(const struct config *cfg)
{
    struct outcome o;
    struct mapping m = {0};
    memset(&o, 0, sizeof o);
    struct worker *ws = alloc_workers(cfg->threads);
    double t_setup = now_s();
    if (cfg->workload == W_POPULATE)
        setup_populate(cfg, &o);
    else
        setup_buffer(cfg, &m, &o);
    o.setup = now_s() - t_setup;
    check_setup_interrupt();

    measure(cfg, ws, m.base, &o);

    if (m.base)
        read_evidence(m.base, &o.ev_end);
    else
        o.ev_end = o.ev_setup;
    if ((m.base && !o.ev_end.found) || !o.ev_setup.found)
        fprintf(stderr, "hugelab-mem: warning: buffer not found in /proc/self/smaps\n");
    print_json(cfg, &o);
    if (m.base)
        unmap_buffer(&m);
    free(ws);
    return g_sigint ? 130 : 0;
}

int main(int argc, char **argv)
{
    struct config cfg;
    parse_args(argc, argv, &cfg);
    install_signals();
    if (cfg.n_inter)
        return run_interleaved(&cfg);
    return run_single(&cfg);
}
