/* pgbench scripts: the built-in ones, and a parser for a user's script that supports
 * `\set name expr` (integers, :vars, + - * / %, parentheses, random(a, b) and
 * random_uniform(a, b)) and SQL commands ending in ';' with :name substituted as $n.
 * Any other meta-command is refused with its line number. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgscript.h"

static const char SELECT_ONLY[] =
    "\\set aid random(1, 100000 * :scale)\n"
    "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n";
static const char SIMPLE_UPDATE[] =
    "\\set aid random(1, 100000 * :scale)\n\\set bid random(1, 1 * :scale)\n"
    "\\set tid random(1, 10 * :scale)\n\\set delta random(-5000, 5000)\nBEGIN;\n"
    "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
    "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, "
    ":delta, CURRENT_TIMESTAMP);\nEND;\n";
static const char TPCB_LIKE[] =
    "\\set aid random(1, 100000 * :scale)\n\\set bid random(1, 1 * :scale)\n"
    "\\set tid random(1, 10 * :scale)\n\\set delta random(-5000, 5000)\nBEGIN;\n"
    "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
    "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
    "UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;\n"
    "UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;\n"
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, "
    ":delta, CURRENT_TIMESTAMP);\nEND;\n";

const char *ps_builtin(const char *name)
{
    if (strcmp(name, "select-only") == 0)
        return SELECT_ONLY;
    if (strcmp(name, "simple-update") == 0)
        return SIMPLE_UPDATE;
    if (strcmp(name, "tpcb-like") == 0)
        return TPCB_LIKE;
    return NULL;
}

typedef struct { ps_script *s; const char *p; int line; char *err; } parser;

static int var_index(ps_script *s, const char *name, size_t len, int create)
{
    for (int i = 0; i < s->nvars; i++)
        if (strlen(s->vars[i]) == len && strncmp(s->vars[i], name, len) == 0)
            return i;
    if (!create || s->nvars == PS_MAX_VARS)
        return -1;
    s->vars[s->nvars] = strndup(name, len);
    return s->nvars++;
}

static int node(parser *ps, int kind, char op, int64_t val, int a, int b)
{
    ps_script *s = ps->s;
    if (s->nnodes == PS_MAX_NODES) {
        rm_err(ps->err, "line %d: expression too large", ps->line);
        return -1;
    }
    s->nodes[s->nnodes] = (ps_node){kind, op, val, a, b};
    return s->nnodes++;
}

static void blanks(parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t')
        ps->p++;
}

static size_t ident_len(const char *p)
{
    size_t n = 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_')
        n++;
    return n;
}

static int expr(parser *ps);

static int call(parser *ps, size_t n)
{
    const char *name = ps->p;
    if (!((n == 6 && strncmp(name, "random", 6) == 0) ||
          (n == 14 && strncmp(name, "random_uniform", 14) == 0))) {
        rm_err(ps->err, "line %d: unsupported function %.*s (random, random_uniform)",
               ps->line, (int)n, name);
        return -1;
    }
    ps->p += n;
    blanks(ps);
    if (*ps->p++ != '(')
        goto bad;
    int a = expr(ps);
    if (a < 0)
        return -1;
    blanks(ps);
    if (*ps->p++ != ',')
        goto bad;
    int b = expr(ps);
    if (b < 0)
        return -1;
    blanks(ps);
    if (*ps->p++ != ')')
        goto bad;
    return node(ps, PS_RANDOM, 0, 0, a, b);
bad:
    rm_err(ps->err, "line %d: random takes (lo, hi)", ps->line);
    return -1;
}

static int primary(parser *ps)
{
    blanks(ps);
    const char *p = ps->p;
    if (isdigit((unsigned char)*p)) {
        char *end;
        long long v = strtoll(p, &end, 10);
        ps->p = end;
        return node(ps, PS_NUM, 0, v, 0, 0);
    }
    if (*p == ':' && ident_len(p + 1) > 0) {
        size_t n = ident_len(p + 1);
        int v = var_index(ps->s, p + 1, n, 0);
        if (v < 0) {
            rm_err(ps->err, "line %d: undefined variable :%.*s", ps->line, (int)n, p + 1);
            return -1;
        }
        ps->p += n + 1;
        return node(ps, PS_VAR, 0, v, 0, 0);
    }
    if (*p == '-') {
        ps->p++;
        int a = primary(ps);
        return a < 0 ? -1 : node(ps, PS_NEG, 0, 0, a, 0);
    }
    if (*p == '(') {
        ps->p++;
        int a = expr(ps);
        blanks(ps);
        if (a >= 0 && *ps->p++ == ')')
            return a;
        rm_err(ps->err, "line %d: missing ')'", ps->line);
        return -1;
    }
    if (isalpha((unsigned char)*p))
        return call(ps, ident_len(p));
    rm_err(ps->err, "line %d: cannot read the expression at \"%.20s\"", ps->line, p);
    return -1;
}

static int binary(parser *ps, const char *ops, int (*next)(parser *))
{
    int a = next(ps);
    for (;;) {
        if (a < 0)
            return -1;
        blanks(ps);
        char op = *ps->p;
        if (op == 0 || !strchr(ops, op))
            return a;
        ps->p++;
        int b = next(ps);
        if (b < 0)
            return -1;
        a = node(ps, PS_BIN, op, 0, a, b);
    }
}

static int term(parser *ps) { return binary(ps, "*/%", primary); }
static int expr(parser *ps) { return binary(ps, "+-", term); }

static ps_cmd *new_cmd(parser *ps)
{
    ps_script *s = ps->s;
    if (s->ncmds == PS_MAX_CMDS) {
        rm_err(ps->err, "line %d: more than %d commands", ps->line, PS_MAX_CMDS);
        return NULL;
    }
    ps_cmd *c = &s->cmds[s->ncmds++];
    memset(c, 0, sizeof *c);
    c->line = ps->line;
    return c;
}

/* `\set name expr` (the backslash already consumed); other meta-commands are refused. */
static int meta(parser *ps, const char *line)
{
    size_t n = ident_len(line);
    if (n != 3 || strncmp(line, "set", 3) != 0) {
        rm_err(ps->err, "line %d: unsupported meta-command \\%.*s (only \\set is)",
               ps->line, (int)(n ? n : 1), line);
        return -1;
    }
    ps->p = line + 3;
    blanks(ps);
    size_t vn = ident_len(ps->p);
    if (vn == 0) {
        rm_err(ps->err, "line %d: \\set needs a variable name", ps->line);
        return -1;
    }
    const char *name = ps->p;
    ps->p += vn;
    int root = expr(ps);
    if (root < 0)
        return -1;
    blanks(ps);
    if (*ps->p != 0 && *ps->p != '\n') {
        rm_err(ps->err, "line %d: unexpected \"%.20s\" after the expression", ps->line, ps->p);
        return -1;
    }
    ps_cmd *c = new_cmd(ps);
    int v = var_index(ps->s, name, vn, 1);
    if (!c || v < 0)
        return -1;
    c->var = v;
    c->expr = root;
    return 0;
}

/* One SQL command: copy it, replacing each :name (outside quotes, not ::) with $n. */
static int sql(parser *ps, const char *text, size_t len, int line)
{
    ps_cmd *c = new_cmd(ps);
    char *out = c ? malloc(len * 4 + 16) : NULL;
    if (!out)
        return -1;
    size_t o = 0;
    int quoted = 0;
    c->is_sql = 1;
    c->line = line;
    for (size_t i = 0; i < len; i++) {
        size_t n = text[i] == ':' && !quoted ? ident_len(text + i + 1) : 0;
        if (text[i] == '\'')
            quoted = !quoted;
        if (text[i] == ':' && i + 1 < len && text[i + 1] == ':') {
            out[o++] = text[i++];
        } else if (n > 0) {
            int v = var_index(ps->s, text + i + 1, n, 0);
            if (v < 0 || c->nparams == PS_MAX_PARAMS) {
                rm_err(ps->err, "line %d: %s :%.*s", line, v < 0 ? "undefined variable"
                       : "too many parameters at", (int)n, text + i + 1);
                return -1;
            }
            c->params[c->nparams++] = v;
            o += (size_t)sprintf(out + o, "$%d", c->nparams);
            i += n;
            continue;
        }
        out[o++] = text[i];
    }
    out[o] = 0;
    c->sql = out;
    return 0;
}

/* The SQL that starts at `p` runs to the first ';' that ends a line. */
static const char *sql_end(const char *p)
{
    for (const char *q = p; *q; q++) {
        if (*q != ';')
            continue;
        const char *r = q + 1;
        while (*r == ' ' || *r == '\t' || *r == '\r')
            r++;
        if (*r == '\n' || *r == 0)
            return q + 1;
    }
    return p + strlen(p);
}

int ps_parse(const char *text, ps_script *s, char *err)
{
    memset(s, 0, sizeof *s);
    s->vars[0] = strdup("scale");
    s->vars[1] = strdup("client_id");
    s->nvars = 2;
    parser ps = {s, text, 1, err};
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        const char *eol = strchr(p, '\n');
        eol = eol ? eol : p + strlen(p);
        if (*p == '\\') {
            char *line = strndup(p + 1, (size_t)(eol - p - 1));
            int rc = meta(&ps, line);
            free(line);
            if (rc != 0)
                return -1;
        } else if (*p != '\n' && *p != 0 && strncmp(p, "--", 2) != 0) {
            const char *end = sql_end(p);
            if (sql(&ps, p, (size_t)(end - p), ps.line) != 0)
                return -1;
            for (const char *q = p; q < end; q++)
                ps.line += *q == '\n';
            eol = strchr(end, '\n');
            eol = eol ? eol : end + strlen(end);
        }
        p = *eol ? eol + 1 : eol;
        ps.line++;
    }
    int nsql = 0;
    for (int i = 0; i < s->ncmds; i++)
        nsql += s->cmds[i].is_sql;
    if (nsql == 0) {
        rm_err(err, "the script has no SQL command");
        return -1;
    }
    return 0;
}

int ps_eval(const ps_script *s, int node, const int64_t *vars, rm_rng *rng, int64_t *out,
            char *err)
{
    const ps_node *n = &s->nodes[node];
    int64_t a = 0, b = 0;
    if (n->kind == PS_NUM || n->kind == PS_VAR) {
        *out = n->kind == PS_NUM ? n->val : vars[n->val];
        return 0;
    }
    if (ps_eval(s, n->a, vars, rng, &a, err) != 0)
        return -1;
    if (n->kind != PS_NEG && ps_eval(s, n->b, vars, rng, &b, err) != 0)
        return -1;
    switch (n->kind == PS_BIN ? n->op : n->kind == PS_NEG ? 'n' : 'r') {
    case 'n': *out = -a; return 0;
    case 'r': *out = rm_range(rng, a, b); return 0;
    case '+': *out = a + b; return 0;
    case '-': *out = a - b; return 0;
    case '*': *out = a * b; return 0;
    default:
        if (b == 0) {
            rm_err(err, "division by zero in \\set");
            return -1;
        }
        *out = n->op == '/' ? a / b : a % b;
        return 0;
    }
}
