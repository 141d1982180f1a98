/* hugelab-reqmix: the command line, and the JSON report on stdout.
 *
 *   hugelab-reqmix --server redis:127.0.0.1:6380 --server redis:127.0.0.1:6381 \
 *       --clients 1 --window-ops 50 --warm-ops 5 --duration-s 10 --seed 7 --preload
 *
 * prints one JSON object: every window (arm, block, position in the block, timed ops, ns,
 * the client's CPU ns, when it started after the client began its windows), per-arm latency
 * percentiles and op totals, and the client's rusage. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "out.h"

static const char USAGE[] =
    "usage: hugelab-reqmix --server PROTO:SPEC [--server ...] [options]\n"
    "  PROTO:SPEC  redis:HOST:PORT | memcached:HOST:PORT | http:HOST:PORT | pg:CONNINFO |\n"
    "              mysql:socket=PATH,db=NAME[,user=U][,host=H][,port=P]\n"
    "  --clients K         connections per server, run in lockstep (1)\n"
    "  --window-ops N      timed ops per client per window (20 unless --window-ms)\n"
    "  --window-ms MS      or: each window lasts MS milliseconds\n"
    "  --warm-ops N        untimed ops at the start of each window (0)\n"
    "  --windows N | --duration-s S   how long (whole ABBA blocks, by time at least 2; 10 s)\n"
    "  --seed S            order of the servers in each block (1)\n"
    "  --keyspace N (10000) --value-size B (100) --set-ratio F (0) --preload\n"
    "                      redis, memcached: keys key:%012d, a set with probability F;\n"
    "                      --preload sets every key once before the windows;\n"
    "                      http: GET /key:%012d (--preload asks each once: a cache's misses)\n"
    "  --pg-builtin select-only|simple-update|tpcb-like | --pg-file PATH, --pg-scale N (1)\n"
    "  --tables N (1) --table-size N (10000) --range-size N (100)   mysql: oltp_read_only\n"
    "Passwords: PGPASSWORD (or a passfile) for pg, MYSQL_PWD for mysql.\n"
    "Prints one JSON object. Exit 2: bad usage or script; 3: a server failed.\n";

/* The protocol table: every protocol the client speaks, by its --server prefix (its name). */
static const rm_proto *const PROTOCOLS[] = {&rm_redis, &rm_memc, &rm_http, &rm_pg, &rm_mysql};
#define NPROTOCOLS (int)(sizeof PROTOCOLS / sizeof PROTOCOLS[0])

static const rm_proto *find_proto(const char *spec, const char **rest)
{
    for (int i = 0; i < NPROTOCOLS; i++) {
        size_t n = strlen(PROTOCOLS[i]->name);
        if (strncmp(spec, PROTOCOLS[i]->name, n) == 0 && spec[n] == ':') {
            *rest = spec + n + 1;
            return PROTOCOLS[i];
        }
    }
    return NULL;
}

/* "unknown protocol (redis, memcached, ...)", the names from the table. */
static const char *unknown_proto(void)
{
    static char msg[256];
    int n = snprintf(msg, sizeof msg, "unknown protocol (");
    for (int i = 0; i < NPROTOCOLS && n < (int)sizeof msg; i++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%s", i ? ", " : "",
                      PROTOCOLS[i]->name);
    if (n < (int)sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n, ")");
    return msg;
}

static void usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "hugelab-reqmix: %s%s%s\n%s", msg, arg ? ": " : "", arg ? arg : "", USAGE);
    exit(2);
}

static long num(const char *s, const char *opt, long lo)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || v < lo)
        usage_error("bad number", opt);
    return v;
}

static double fnum(const char *s, const char *opt)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == 0 || *end != 0 || v < 0)
        usage_error("bad number", opt);
    return v;
}

static const struct option LONGOPTS[] = {
    {"server", 1, 0, 's'},      {"clients", 1, 0, 'c'},    {"window-ops", 1, 0, 'n'},
    {"window-ms", 1, 0, 'm'},   {"warm-ops", 1, 0, 'w'},   {"windows", 1, 0, 'W'},
    {"duration-s", 1, 0, 'd'},  {"seed", 1, 0, 'S'},       {"keyspace", 1, 0, 'k'},
    {"value-size", 1, 0, 'v'},  {"set-ratio", 1, 0, 'r'},  {"preload", 0, 0, 'p'},
    {"pg-scale", 1, 0, 'g'},    {"pg-builtin", 1, 0, 'b'}, {"pg-file", 1, 0, 'f'},
    {"tables", 1, 0, 't'},      {"table-size", 1, 0, 'T'}, {"range-size", 1, 0, 'R'},
    {"help", 0, 0, 'h'},        {0, 0, 0, 0}};

static void set_opt(int c, rm_opts *o, rm_run *r)
{
    const char *rest;
    switch (c) {
    case 's':
        if (r->nserv == RM_MAX_SERVERS)
            usage_error("too many servers", optarg);
        r->proto[r->nserv] = find_proto(optarg, &rest);
        if (!r->proto[r->nserv])
            usage_error(unknown_proto(), optarg);
        r->spec[r->nserv++] = rest;
        break;
    case 'c': o->clients = (int)num(optarg, "--clients", 1); break;
    case 'n': o->window_ops = num(optarg, "--window-ops", 1); break;
    case 'm': o->window_ms = num(optarg, "--window-ms", 1); break;
    case 'w': o->warm_ops = num(optarg, "--warm-ops", 0); break;
    case 'W': o->windows = num(optarg, "--windows", 1); break;
    case 'd': o->duration_s = fnum(optarg, "--duration-s"); break;
    case 'S': o->seed = (uint64_t)num(optarg, "--seed", 0); break;
    case 'k': o->keyspace = num(optarg, "--keyspace", 1); break;
    case 'v': o->value_size = num(optarg, "--value-size", 0); break;
    case 'r': o->set_ratio = fnum(optarg, "--set-ratio"); break;
    case 'p': o->preload = 1; break;
    case 'g': o->pg_scale = num(optarg, "--pg-scale", 1); break;
    case 'b': o->pg_builtin = optarg; break;
    case 'f': o->pg_file = optarg; break;
    case 't': o->tables = num(optarg, "--tables", 1); break;
    case 'T': o->table_size = num(optarg, "--table-size", 1); break;
    case 'R': o->range_size = num(optarg, "--range-size", 1); break;
    case 'h': fputs(USAGE, stdout); exit(0);
    default: usage_error("bad option", NULL);
    }
}

static void parse_args(int argc, char **argv, rm_opts *o, rm_run *r)
{
    *o = (rm_opts){.clients = 1, .seed = 1, .keyspace = 10000, .value_size = 100,
                   .pg_scale = 1, .tables = 1, .table_size = 10000, .range_size = 100};
    int c;
    while ((c = getopt_long(argc, argv, "", LONGOPTS, NULL)) != -1)
        set_opt(c, o, r);
    if (optind < argc)
        usage_error("unexpected argument", argv[optind]);
    if (r->nserv == 0)
        usage_error("no --server given", NULL);
    if (o->clients > 256)
        usage_error("at most 256 clients", NULL);
    if (o->window_ops > 0 && o->window_ms > 0)
        usage_error("give --window-ops or --window-ms, not both", NULL);
    if (o->window_ops == 0 && o->window_ms == 0)
        o->window_ops = 20;
    if (o->windows > 0 && o->duration_s > 0)
        usage_error("give --windows or --duration-s, not both", NULL);
    if (o->windows == 0 && o->duration_s == 0)
        o->duration_s = 10;
    if (o->pg_builtin && o->pg_file)
        usage_error("give --pg-builtin or --pg-file, not both", NULL);
    r->o = o;
}

/* Each protocol's one-time setup (a pgbench script's parse), once per protocol. */
static void setup_protocols(rm_run *r)
{
    char err[RM_ERRLEN];
    for (int s = 0; s < r->nserv; s++) {
        int seen = 0;
        for (int j = 0; j < s; j++)
            seen |= r->proto[j] == r->proto[s];
        if (!seen && r->proto[s]->setup && r->proto[s]->setup(r->o, err) != 0) {
            fprintf(stderr, "hugelab-reqmix: %s: %s\n", r->proto[s]->name, err);
            exit(2);
        }
    }
}

int main(int argc, char **argv)
{
    static rm_run run;
    rm_opts o;
    char err[RM_ERRLEN];
    parse_args(argc, argv, &o, &run);
    setup_protocols(&run);
    if (rm_connect_all(&run, err) != 0) {
        fprintf(stderr, "hugelab-reqmix: %s\n", err);
        return 3;
    }
    if (rm_execute(&run, err) != 0) {
        fprintf(stderr, "hugelab-reqmix: %s\n", err);
        return 3;
    }
    rm_report(&run, stdout);
    rm_close_all(&run);
    return 0;
}
