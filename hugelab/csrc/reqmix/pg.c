/* PostgreSQL through libpq: one op is one run of the pgbench script (built-in or a user's),
 * each SQL command a prepared statement, as `pgbench -M prepared` runs it. The connection is
 * a libpq conninfo string; a password comes from PGPASSWORD or a passfile, never argv. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgscript.h"

#ifdef RM_WITH_PG
#include <libpq-fe.h>

static ps_script script;

typedef struct {
    PGconn *pg;
    int64_t vars[PS_MAX_VARS];
} pg_conn;

static char *read_file(const char *path, char *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        rm_err(err, "cannot read %s", path);
        return NULL;
    }
    char *text = malloc(1 << 20);
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (text)
        text[n] = 0;
    return text;
}

static int pg_setup(const rm_opts *o, char *err)
{
    const char *name = o->pg_builtin ? o->pg_builtin : "select-only";
    char *owned = NULL;
    const char *text = o->pg_file ? (owned = read_file(o->pg_file, err)) : ps_builtin(name);
    if (!text) {
        if (!o->pg_file)
            rm_err(err, "unknown built-in script %s (select-only, simple-update, tpcb-like)",
                   name);
        return -1;
    }
    char e[RM_ERRLEN];
    int rc = ps_parse(text, &script, e);
    if (rc != 0)
        rm_err(err, "%s: %s", o->pg_file ? o->pg_file : name, e);
    free(owned);
    return rc;
}

static int prepare_all(pg_conn *c, char *err)
{
    for (int i = 0; i < script.ncmds; i++) {
        const ps_cmd *cmd = &script.cmds[i];
        if (!cmd->is_sql)
            continue;
        char name[16];
        snprintf(name, sizeof name, "rm%d", i);
        PGresult *res = PQprepare(c->pg, name, cmd->sql, 0, NULL);
        int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok)
            rm_err(err, "script line %d: cannot prepare: %s", cmd->line,
                   PQerrorMessage(c->pg));
        PQclear(res);
        if (!ok)
            return -1;
    }
    return 0;
}

static int pg_open(const rm_proto *p, const char *spec, const rm_opts *o, int client,
                   void **conn, char *err)
{
    (void)p;
    pg_conn *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->pg = PQconnectdb(spec);
    if (PQstatus(c->pg) != CONNECTION_OK) {
        rm_err(err, "cannot connect: %s", PQerrorMessage(c->pg));
        PQfinish(c->pg);
        free(c);
        return -1;
    }
    c->vars[0] = o->pg_scale;
    c->vars[1] = client;
    *conn = c;
    return prepare_all(c, err);
}

static int exec_sql(pg_conn *c, int i, char *err)
{
    const ps_cmd *cmd = &script.cmds[i];
    char text[PS_MAX_PARAMS][24], name[16];
    const char *values[PS_MAX_PARAMS];
    for (int p = 0; p < cmd->nparams; p++) {
        snprintf(text[p], sizeof text[p], "%lld", (long long)c->vars[cmd->params[p]]);
        values[p] = text[p];
    }
    snprintf(name, sizeof name, "rm%d", i);
    PGresult *res = PQexecPrepared(c->pg, name, cmd->nparams, values, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok)
        rm_err(err, "script line %d: %s", cmd->line, PQerrorMessage(c->pg));
    PQclear(res);
    return ok ? 0 : -1;
}

static int pg_op(void *conn, rm_rng *rng, char *err)
{
    pg_conn *c = conn;
    for (int i = 0; i < script.ncmds; i++) {
        const ps_cmd *cmd = &script.cmds[i];
        if (cmd->is_sql) {
            if (exec_sql(c, i, err) != 0)
                return -1;
        } else if (ps_eval(&script, cmd->expr, c->vars, rng, &c->vars[cmd->var], err) != 0) {
            return -1;
        }
    }
    return 0;
}

static void pg_close(void *conn)
{
    pg_conn *c = conn;
    PQfinish(c->pg);
    free(c);
}

const rm_proto rm_pg = {"pg", pg_setup, pg_open, pg_op, NULL, pg_close, NULL};

#else

static int pg_missing(const rm_opts *o, char *err)
{
    (void)o;
    rm_err(err, "this hugelab-reqmix was built without libpq (install libpq-dev, rebuild)");
    return -1;
}

const rm_proto rm_pg = {"pg", pg_missing, NULL, NULL, NULL, NULL, NULL};
#endif
