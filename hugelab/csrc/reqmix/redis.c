/* Redis over RESP: GET and SET of `--keyspace` keys with `--value-size` byte values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

static size_t encode(const kv_conn *c, char *out, const char *key, int klen, int is_set)
{
    if (!is_set)
        return (size_t)sprintf(out, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", klen, key);
    size_t n = (size_t)sprintf(out, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%ld\r\n", klen, key,
                               c->value_size);
    return kv_set_value(c, out, n);
}

/* Read one reply: +OK, a bulk string ($-1 for a missing key), or an error. */
static int reply(kv_conn *c, char *err)
{
    char *line;
    size_t len;
    if (rm_line(&c->sock, &line, &len, err) != 0)
        return -1;
    if (len > 0 && line[0] == '+')
        return 0;
    if (len > 0 && line[0] == '$') {
        long n = strtol(line + 1, NULL, 10);
        return n < 0 ? 0 : rm_skip(&c->sock, (size_t)n + 2, err);
    }
    rm_err(err, "unexpected redis reply: %.200s", line);
    return -1;
}

static const kv_codec codec = {encode, reply};
const rm_proto rm_redis = KV_PROTO("redis", &codec);
