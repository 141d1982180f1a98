/* MariaDB/MySQL through libmariadb: one op is one sysbench oltp_read_only transaction:
 * BEGIN, 10 point selects, then a simple, a sum, an order and a distinct range of
 * --range-size rows, COMMIT; tables sbtest1..N of --table-size rows, keys drawn uniformly,
 * every query a prepared statement. Spec: socket=PATH,db=NAME[,user=U][,host=H][,port=P];
 * a password comes from MYSQL_PWD, never argv. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqmix.h"

#ifdef RM_WITH_MYSQL
#include <mysql.h>

#define MY_KINDS 5
static const char *QUERIES[MY_KINDS] = {
    "SELECT c FROM sbtest%ld WHERE id=?",
    "SELECT c FROM sbtest%ld WHERE id BETWEEN ? AND ?",
    "SELECT SUM(k) FROM sbtest%ld WHERE id BETWEEN ? AND ?",
    "SELECT c FROM sbtest%ld WHERE id BETWEEN ? AND ? ORDER BY c",
    "SELECT DISTINCT c FROM sbtest%ld WHERE id BETWEEN ? AND ? ORDER BY c"};

typedef struct {
    MYSQL *my;
    long tables, table_size, range_size;
    MYSQL_STMT **stmts; /* [table * MY_KINDS + kind] */
} my_conn;

typedef struct { char socket[256], db[64], user[64], host[128]; unsigned port; } my_spec;

static int parse_spec(const char *spec, my_spec *s, char *err)
{
    *s = (my_spec){.user = "root"};
    char *copy = strdup(spec), *save = NULL;
    for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (eq)
            *eq++ = 0;
        char *dst = !eq ? NULL : !strcmp(kv, "socket") ? s->socket : !strcmp(kv, "db") ? s->db
                    : !strcmp(kv, "user") ? s->user : !strcmp(kv, "host") ? s->host : NULL;
        size_t cap = dst == s->socket ? sizeof s->socket : dst == s->host ? sizeof s->host : 64;
        if (eq && !strcmp(kv, "port")) {
            s->port = (unsigned)atoi(eq);
        } else if (!dst || strlen(eq) >= cap) {
            rm_err(err, "bad mysql setting %s (socket, db, user, host, port)", kv);
            free(copy);
            return -1;
        } else {
            strcpy(dst, eq);
        }
    }
    free(copy);
    return 0;
}

static int prepare_all(my_conn *c, char *err)
{
    c->stmts = calloc((size_t)c->tables * MY_KINDS, sizeof *c->stmts);
    for (long t = 0; c->stmts && t < c->tables; t++) {
        for (int k = 0; k < MY_KINDS; k++) {
            char q[160];
            snprintf(q, sizeof q, QUERIES[k], t + 1);
            MYSQL_STMT *st = mysql_stmt_init(c->my);
            c->stmts[t * MY_KINDS + k] = st;
            if (!st || mysql_stmt_prepare(st, q, strlen(q)) != 0) {
                rm_err(err, "cannot prepare %s: %s", q, st ? mysql_stmt_error(st) : "no memory");
                return -1;
            }
        }
    }
    return c->stmts ? 0 : -1;
}

static int my_open(const rm_proto *p, const char *spec, const rm_opts *o, int client,
                   void **conn, char *err)
{
    (void)p;
    (void)client;
    my_spec s;
    my_conn *c = calloc(1, sizeof *c);
    if (!c || parse_spec(spec, &s, err) != 0)
        return -1;
    c->tables = o->tables;
    c->table_size = o->table_size;
    c->range_size = o->range_size;
    c->my = mysql_init(NULL);
    if (!mysql_real_connect(c->my, s.host[0] ? s.host : NULL, s.user, getenv("MYSQL_PWD"),
                            s.db, s.port, s.socket[0] ? s.socket : NULL, 0)) {
        rm_err(err, "cannot connect: %s", mysql_error(c->my));
        return -1;
    }
    *conn = c;
    return prepare_all(c, err);
}

/* Execute one prepared query with 1 or 2 integer parameters and read all its rows. */
static int run_stmt(MYSQL_STMT *st, long long a, long long b, char *err)
{
    MYSQL_BIND bind[2];
    memset(bind, 0, sizeof bind);
    long long v[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        bind[i].buffer_type = MYSQL_TYPE_LONGLONG;
        bind[i].buffer = &v[i];
    }
    if (mysql_stmt_bind_param(st, bind) != 0 || mysql_stmt_execute(st) != 0 ||
        mysql_stmt_store_result(st) != 0) {
        rm_err(err, "query failed: %s", mysql_stmt_error(st));
        return -1;
    }
    mysql_stmt_free_result(st);
    return 0;
}

static int my_query(my_conn *c, const char *sql, char *err)
{
    if (mysql_query(c->my, sql) != 0) {
        rm_err(err, "%s failed: %s", sql, mysql_error(c->my));
        return -1;
    }
    return 0;
}

static int my_op(void *conn, rm_rng *rng, char *err)
{
    my_conn *c = conn;
    if (my_query(c, "BEGIN", err) != 0)
        return -1;
    for (int q = 0; q < 14; q++) {
        int kind = q < 10 ? 0 : q - 9;
        long t = (long)rm_below(rng, (uint64_t)c->tables);
        long long lo = rm_range(rng, 1, c->table_size);
        if (run_stmt(c->stmts[t * MY_KINDS + kind], lo, lo + c->range_size - 1, err) != 0)
            return -1;
    }
    return my_query(c, "COMMIT", err);
}

static void my_close(void *conn)
{
    my_conn *c = conn;
    for (long i = 0; c->stmts && i < c->tables * MY_KINDS; i++)
        if (c->stmts[i])
            mysql_stmt_close(c->stmts[i]);
    free(c->stmts);
    mysql_close(c->my);
    free(c);
}

const rm_proto rm_mysql = {"mysql", NULL, my_open, my_op, NULL, my_close, NULL};

#else

static int my_missing(const rm_opts *o, char *err)
{
    (void)o;
    rm_err(err, "this hugelab-reqmix was built without libmariadb (install libmariadb-dev, "
           "rebuild)");
    return -1;
}

const rm_proto rm_mysql = {"mysql", my_missing, NULL, NULL, NULL, NULL, NULL};
#endif
