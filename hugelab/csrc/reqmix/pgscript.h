/* A pgbench script: `\set name expr` lines and SQL commands with :name variables. */
#ifndef REQMIX_PGSCRIPT_H
#define REQMIX_PGSCRIPT_H

#include "reqmix.h"

#define PS_MAX_VARS 64
#define PS_MAX_CMDS 64
#define PS_MAX_NODES 1024
#define PS_MAX_PARAMS 32

enum { PS_NUM, PS_VAR, PS_BIN, PS_NEG, PS_RANDOM };

typedef struct { int kind; char op; int64_t val; int a, b; } ps_node;

typedef struct {
    int is_sql, line;
    int var, expr;                 /* \set: the variable and its expression's root node */
    char *sql;                     /* SQL with $1..$n in place of the :names */
    int nparams, params[PS_MAX_PARAMS];
} ps_cmd;

typedef struct {
    int nvars, ncmds, nnodes;
    char *vars[PS_MAX_VARS];       /* 0: scale, 1: client_id */
    ps_cmd cmds[PS_MAX_CMDS];
    ps_node nodes[PS_MAX_NODES];
} ps_script;

const char *ps_builtin(const char *name);
int ps_parse(const char *text, ps_script *s, char *err);
int ps_eval(const ps_script *s, int node, const int64_t *vars, rm_rng *rng, int64_t *out,
            char *err);

#endif
