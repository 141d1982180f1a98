/* hugelab-mem's output: one JSON object on stdout, for a single buffer or interleaved ones. */
#include "hugelab-mem.h"

#include <errno.h>

static const char *errno_name(int e)
{
    switch (e) {
    case 0: return "0";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case EBUSY: return "EBUSY";
    case EFAULT: return "EFAULT";
    case ENOSYS: return "ENOSYS";
    default: return "EOTHER";
    }
}

static void print_evidence_fields(const struct evidence *ev)
{
    for (int i = 0; i < N_EVIDENCE; i++) {
        int last = i == N_EVIDENCE - 1;
        const char *suffix = last ? "" : "_kB"; /* THPeligible is a flag, not a size */
        if (ev->v[i] < 0)
            printf("\"%s%s\":null%s", evidence_keys[i], suffix, last ? "" : ",");
        else
            printf("\"%s%s\":%lld%s", evidence_keys[i], suffix, ev->v[i], last ? "" : ",");
    }
}

static void print_size_label(uint64_t kb)
{
    if (kb % 1048576 == 0)
        printf("\"%lluG\"", (unsigned long long)(kb / 1048576));
    else if (kb % 1024 == 0)
        printf("\"%lluM\"", (unsigned long long)(kb / 1024));
    else
        printf("\"%lluK\"", (unsigned long long)kb);
}

/* The census in hugelab.trial.folios' schema (kB), as `"folios":{...}`. */
static void print_census(const struct census *c)
{
    const uint64_t kb = BASE_PAGE / 1024;
    if (!c->available) {
        printf("\"folios\":{\"available\":false,\"reason\":\"%s\",\"source\":\"hugelab-mem\"}",
               c->reason);
        return;
    }
    uint64_t present = c->hugetlb + c->partial + c->other;
    for (unsigned o = 0; o < CENSUS_ORDERS; o++)
        present += c->by_order[o];
    printf("\"folios\":{\"available\":true,\"source\":\"hugelab-mem\",\"samples\":1,"
           "\"folios_kb\":{");
    int first = 1;
    for (unsigned o = 0; o < CENSUS_ORDERS; o++) {
        if (!c->by_order[o])
            continue;
        printf(first ? "" : ",");
        print_size_label(((uint64_t)1 << o) * kb);
        printf(":%llu", (unsigned long long)(c->by_order[o] * kb));
        first = 0;
    }
    printf("},\"hugetlb_kb\":%llu,\"partial_kb\":%llu,\"other_kb\":%llu,\"present_kb\":%llu,"
           "\"absent_kb\":%llu,\"sampled_kb\":%llu}",
           (unsigned long long)(c->hugetlb * kb), (unsigned long long)(c->partial * kb),
           (unsigned long long)(c->other * kb), (unsigned long long)(present * kb),
           (unsigned long long)(c->absent * kb), (unsigned long long)(c->sampled * kb));
}

/* `"evidence":{...,"after_populate":{...},"folios":{...}}`: smaps at the end and after
 * setup, and the folio census. */
static void print_evidence(const struct evidence *end, const struct evidence *setup,
                           const struct census *census)
{
    printf(",\"evidence\":{");
    print_evidence_fields(end);
    printf(",\"after_populate\":{");
    print_evidence_fields(setup);
    printf("},");
    print_census(census);
    printf("}");
}

/* `,"layout":{...}`: the sparse layout and the resident kB it predicts -- with 4 KiB pages
 * (the touched pages), with THP (every touched 2 MiB region whole), and with this run's
 * backing (`expected_kb`, in pages of `fault_kb`: hugetlb ones are counted in smaps'
 * *_Hugetlb fields, not in Rss). */
static void print_layout(const struct config *cfg)
{
    struct layout l;
    buffer_layout(cfg, &l);
    size_t fault = backing_fault_size(cfg);
    printf(",\"layout\":{\"touch_fraction\":%.15g,\"regions\":%zu,"
           "\"touched_pages_per_region\":%zu,\"touched_kb\":%llu,"
           "\"expected_rss_4k_kb\":%llu,\"expected_rss_thp_kb\":%llu,"
           "\"fault_kb\":%zu,\"expected_kb\":%llu}",
           cfg->touch_fraction, l.count, cfg->touch_pages,
           (unsigned long long)(l.count * l.span / 1024),
           (unsigned long long)layout_expected_kb(&l, BASE_PAGE),
           (unsigned long long)layout_expected_kb(&l, PMD_SIZE), fault / 1024,
           (unsigned long long)layout_expected_kb(&l, fault));
}

static void print_metrics(const struct config *cfg, const struct outcome *o)
{
    struct layout l;
    buffer_layout(cfg, &l);
    double bytes_mib = (double)o->ops / (1024.0 * 1024.0);
    switch (cfg->workload) {
    case W_CHASE:
    case W_RANDOM:
        printf("\"ns_per_access\":%.4f,\"accesses\":%llu,\"accesses_per_s\":%.1f",
               o->thread_time * 1e9 / (double)o->ops, (unsigned long long)o->ops,
               (double)o->ops / o->wall);
        break;
    case W_SEQ_READ:
    case W_SEQ_WRITE:
        printf("\"mib_per_s\":%.2f,\"bytes\":%llu,\"passes\":%.3f", bytes_mib / o->wall,
               (unsigned long long)o->ops, (double)o->ops / (double)(l.count * l.span));
        break;
    case W_POPULATE:
        printf("\"ns_per_page\":%.3f,\"gib_per_s\":%.4f,\"pages\":%llu",
               o->thread_time * 1e9 / (double)o->ops,
               (double)o->ops * BASE_PAGE / (1024.0 * 1024.0 * 1024.0) / o->wall,
               (unsigned long long)o->ops);
        break;
    }
}

static void print_primary(enum workload w)
{
    const char *name = "ns_per_access", *unit = "ns", *better = "lower";
    if (w == W_SEQ_READ || w == W_SEQ_WRITE) {
        name = "mib_per_s";
        unit = "MiB/s";
        better = "higher";
    } else if (w == W_POPULATE) {
        name = "ns_per_page";
    }
    printf("\"primary\":{\"name\":\"%s\",\"unit\":\"%s\",\"better\":\"%s\"}", name, unit, better);
}

/* `,"collapse":{...` without its closing brace: the result of the setup's MADV_COLLAPSE. */
static void print_collapse_head(const struct collapse_rec *c)
{
    printf(",\"collapse\":{\"result\":\"%s\",\"errno\":%d,\"seconds\":%.6f,\"attempts\":%d",
           errno_name(c->err), c->err, c->seconds, c->attempts);
}

void print_json(const struct config *cfg, const struct outcome *o)
{
    printf("{\"tool\":\"hugelab-mem\",\"version\":%d,\"workload\":\"%s\",\"backing\":\"%s\","
           "\"size_bytes\":%zu,\"threads\":%u,\"seed\":%llu,",
           TOOL_VERSION, workload_names[cfg->workload], cfg->name, cfg->size,
           cfg->threads, (unsigned long long)cfg->seed);
    if (cfg->workload == W_CHASE)
        printf("\"stride_bytes\":%zu,", cfg->stride);
    printf("\"duration_s\":%.6f,\"setup_s\":%.6f,\"interrupted\":%s,\"checksum\":%llu,",
           o->wall, o->setup, g_sigint ? "true" : "false", (unsigned long long)o->checksum);
    printf("\"metrics\":{");
    print_metrics(cfg, o);
    printf("},");
    print_primary(cfg->workload);
    if (cfg->mthp_kb)
        printf(",\"mthp_kb\":%u", cfg->mthp_kb);
    if (cfg->sparse)
        print_layout(cfg);
    if (o->collapse.done) {
        print_collapse_head(&o->collapse);
        if (cfg->workload == W_POPULATE)
            printf(",\"loop_collapses\":%llu,\"loop_failures\":%llu,\"loop_seconds\":%.6f",
                   (unsigned long long)g_loop_collapses,
                   (unsigned long long)g_loop_collapse_failures,
                   (double)g_loop_collapse_ns * 1e-9);
        printf(",\"before\":{");
        print_evidence_fields(&o->ev_before_collapse);
        printf("}}");
    }
    print_evidence(&o->ev_end, &o->ev_setup, &o->census);
    printf("}\n");
    fflush(stdout);
}

static void print_window_list(const double *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        printf("%s%.4f", i ? "," : "", v[i]);
}

/* Interleaved buffer i: `{"backing":...,"windows_ns":[...],...,"evidence":{...}}`. */
static void print_ibuf(const struct config *cfg, const struct ibuf *b, unsigned i)
{
    uint64_t checksum = cfg->workload == W_CHASE
                            ? (uint64_t)((char *)b->p - b->m.base) : b->sum;
    printf("%s{\"backing\":\"%s\",\"setup_s\":%.6f,\"checksum\":%llu,\"metrics\":{"
           "\"ns_per_access\":%.4f,\"accesses\":%llu,\"accesses_per_s\":%.1f},"
           "\"windows_ns\":[", i ? "," : "", cfg->inter_name[i], b->setup,
           (unsigned long long)checksum,
           b->ops ? b->time * 1e9 / (double)b->ops : 0.0,
           (unsigned long long)b->ops, b->time > 0 ? (double)b->ops / b->time : 0.0);
    print_window_list(b->win_ns, b->n_win);
    printf("]");
    if (cfg->inter_kb[i])
        printf(",\"mthp_kb\":%u", cfg->inter_kb[i]);
    if (b->collapse.done) {
        print_collapse_head(&b->collapse);
        printf(",\"before\":{");
        print_evidence_fields(&b->ev_before_collapse);
        printf("}}");
    }
    print_evidence(&b->ev_end, &b->ev_setup, &b->census);
    printf("}");
}

void print_interleaved(const struct config *cfg, const struct ibuf *b, const struct rounds *r)
{
    printf("{\"tool\":\"hugelab-mem\",\"version\":%d,\"mode\":\"interleaved\","
           "\"workload\":\"%s\",\"size_bytes\":%zu,\"threads\":1,\"seed\":%llu,",
           TOOL_VERSION, workload_names[cfg->workload], cfg->size,
           (unsigned long long)cfg->seed);
    if (cfg->workload == W_CHASE)
        printf("\"stride_bytes\":%zu,", cfg->stride);
    printf("\"duration_s\":%.6f,\"window_s\":%.6f,\"warmup_s\":%.6f,\"interrupted\":%s,",
           r->wall, cfg->window, cfg->warmup, g_sigint ? "true" : "false");
    print_primary(cfg->workload);
    printf(",\"order\":[");
    for (unsigned i = 0; i < r->n_order; i++)
        printf("%s%u", i ? "," : "", r->order[i]);
    printf("],\"buffers\":[");
    for (unsigned i = 0; i < cfg->n_inter; i++)
        print_ibuf(cfg, &b[i], i);
    printf("]}\n");
    fflush(stdout);
}
