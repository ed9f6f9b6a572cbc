/*
 * libFuzzer harness for common/json.c: any bytes to gs_json_parse; a document
 * it accepts is walked whole through every accessor, every string decoded
 * and written back with gs_json_quote (which must parse again, to the same
 * bytes), every value named with gs_quote (one line, bounded). An error
 * must be one line too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "one_line.h"

static void named(const char *s, size_t n, enum gs_quote_as as)
{
    struct gs_str b = {0};
    gs_quote(&b, s, n, as);
    must_be_one_line(gs_str_cstr(&b), b.len);
    /* the value's bytes, each escaped to at most 6, and the quotes and "..." */
    if (as != GS_AS_PATH && b.len > GS_QUOTE_MAX + 5)
        abort();
    gs_str_free(&b);
}

/* A decoded string, quoted, parses back to itself. */
static void round_trip(const char *s, size_t n)
{
    struct gs_str b = {0}, err = {0};
    struct gs_json v;
    gs_json_quote(&b, s, n);
    if (gs_json_parse(b.s, b.len, &v, &err) != 0 || v.type != GS_JSON_STRING)
        abort();
    size_t back_len;
    char *back = gs_json_string(&v, &back_len);
    if (back_len != n || memcmp(back, s, n) != 0)
        abort();
    free(back);
    gs_str_free(&b);
    gs_str_free(&err);
}

static void walk(const struct gs_json *v, int depth)
{
    if (depth > GS_JSON_MAX_DEPTH + 1)
        abort(); /* the parser let through what it says it refuses */
    named(v->p, v->len, GS_AS_JSON);
    switch (v->type) {
    case GS_JSON_STRING: {
        size_t n;
        char *s = gs_json_string(v, &n);
        char head[8];
        if (gs_json_string_into(v, head, sizeof head) != n ||
            memcmp(head, s, n < sizeof head ? n : sizeof head) != 0)
            abort();
        round_trip(s, n);
        named(s, n, GS_AS_STRING);
        named(s, n, GS_AS_PATH);
        free(s);
        break;
    }
    case GS_JSON_NUMBER: {
        int64_t x;
        gs_json_int64(v, &x);
        break;
    }
    case GS_JSON_ARRAY:
    case GS_JSON_OBJECT: {
        struct gs_json key, item, found;
        size_t cursor = 0;
        while (gs_json_next(v, &cursor, &key, &item)) {
            if ((v->type == GS_JSON_OBJECT) != (key.type == GS_JSON_STRING))
                abort();
            if (key.type == GS_JSON_STRING) {
                char name[64];
                size_t n = gs_json_string_into(&key, name, sizeof name - 1);
                if (n < sizeof name - 1 && memchr(name, '\0', n) == NULL) {
                    name[n] = '\0';
                    if (!gs_json_member(v, name, &found))
                        abort();
                }
            }
            walk(&item, depth + 1);
        }
        break;
    }
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_json root;
    struct gs_str err = {0};
    if (gs_json_parse((const char *)data, size, &root, &err) == 0)
        walk(&root, 0);
    else
        must_be_one_line(gs_str_cstr(&err), err.len);
    gs_str_free(&err);
    /* The input as any bytes: named, and written as a JSON string. */
    named((const char *)data, size, GS_AS_STRING);
    named((const char *)data, size, GS_AS_PATH);
    struct gs_str b = {0}, e2 = {0};
    struct gs_json v;
    gs_json_quote(&b, (const char *)data, size);
    if (gs_json_parse(b.s, b.len, &v, &e2) != 0)
        abort(); /* whatever the bytes, the writer's output is JSON */
    gs_str_free(&b);
    gs_str_free(&e2);
    return 0;
}
