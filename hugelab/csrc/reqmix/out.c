/* The JSON report: windows, per-arm latency percentiles and totals, the client's rusage. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "out.h"

static void window_json(rm_run *r, long w, FILE *f)
{
    rm_wmeta *m = rm_meta_at(r, w);
    uint64_t ops = 0, cpu = 0, start = UINT64_MAX, end = 0;
    for (int t = 0; t < r->o->clients; t++) {
        rm_slot *s = rm_slot_at(r, w, t);
        ops += s->ops;
        cpu += s->cpu;
        start = s->start < start ? s->start : start;
        end = s->end > end ? s->end : end;
    }
    fprintf(f, "%s\n{\"arm\":%d,\"block\":%ld,\"pos\":%d,\"ops\":%llu,\"ns\":%llu,"
            "\"cpu_ns\":%llu,\"t_ns\":%llu}", w ? "," : "", m->arm, m->block, m->pos,
            (unsigned long long)ops, (unsigned long long)(end - start),
            (unsigned long long)cpu,
            (unsigned long long)(start >= r->t_begin ? start - r->t_begin : 0));
}

/* The value at quantile q of a histogram of n samples. */
static uint64_t quantile(const uint64_t *h, uint64_t n, double q)
{
    uint64_t want = (uint64_t)(q * (double)n), seen = 0;
    for (int i = 0; i < RM_HIST_BUCKETS; i++) {
        seen += h[i];
        if (h[i] && seen > want)
            return rm_hist_value(i);
    }
    return 0;
}

static void latency_json(rm_run *r, int arm, FILE *f)
{
    uint64_t h[RM_HIST_BUCKETS] = {0}, n = 0, total = 0;
    double sum = 0;
    int top = 0;
    for (int t = 0; t < r->o->clients; t++) {
        size_t cs = (size_t)t * (size_t)r->nserv + (size_t)arm;
        const uint64_t *src = r->hist + cs * RM_HIST_BUCKETS;
        total += r->ops_total[cs];
        for (int i = 0; i < RM_HIST_BUCKETS; i++) {
            h[i] += src[i];
            n += src[i];
            sum += (double)src[i] * (double)rm_hist_value(i);
            top = src[i] && i > top ? i : top;
        }
    }
    fprintf(f, "%s\n{\"arm\":%d,\"protocol\":\"%s\",\"ops_total\":%llu,\"preloaded\":%ld,"
            "\"timed_ops\":%llu,\"mean_ns\":%.0f,\"p50_ns\":%llu,\"p90_ns\":%llu,"
            "\"p99_ns\":%llu,\"p999_ns\":%llu,\"max_ns\":%llu}", arm ? "," : "", arm,
            r->proto[arm]->name, (unsigned long long)total, r->preloaded[arm],
            (unsigned long long)n, n ? sum / (double)n : 0.0,
            (unsigned long long)quantile(h, n, 0.5), (unsigned long long)quantile(h, n, 0.9),
            (unsigned long long)quantile(h, n, 0.99), (unsigned long long)quantile(h, n, 0.999),
            (unsigned long long)(n ? rm_hist_value(top) : 0));
}

static void header_json(rm_run *r, FILE *f)
{
    const rm_opts *o = r->o;
    fprintf(f, "{\"reqmix\":%d,\"arms\":%d,\"clients\":%d,\"window_ops\":%ld,"
            "\"window_ms\":%ld,\"warm_ops\":%ld,\"seed\":%llu,\"servers\":[", RM_OUT_VERSION,
            r->nserv, o->clients, o->window_ops, o->window_ms, o->warm_ops,
            (unsigned long long)o->seed);
    for (int s = 0; s < r->nserv; s++)
        fprintf(f, "%s\"%s\"", s ? "," : "", r->proto[s]->name);
    fprintf(f, "],\"connect_order\":[");
    for (int i = 0; i < r->nserv; i++)
        fprintf(f, "%s%d", i ? "," : "", r->connect_order[i]);
    fprintf(f, "],\"blocks\":%ld,\"wall_ns\":%llu,", r->nwin / (2L * r->nserv),
            (unsigned long long)(r->t_end - r->t_begin));
}

void rm_report(rm_run *r, FILE *f)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    header_json(r, f);
    fprintf(f, "\"rusage\":{\"user_ns\":%lld,\"sys_ns\":%lld},\"latency\":[",
            (long long)ru.ru_utime.tv_sec * 1000000000LL + ru.ru_utime.tv_usec * 1000LL,
            (long long)ru.ru_stime.tv_sec * 1000000000LL + ru.ru_stime.tv_usec * 1000LL);
    for (int s = 0; s < r->nserv; s++)
        latency_json(r, s, f);
    fprintf(f, "],\"windows\":[");
    for (long w = 0; w < r->nwin; w++)
        window_json(r, w, f);
    fprintf(f, "]}\n");
}
