/*
 * The validating JSON parser (see json.h). Two halves: gs_json_parse checks
 * a whole document with the grammar and error positions of Python's json
 * module (its C scanner, 3.11); the accessors below rescan spans of a
 * checked document, so they can be simple and never fail.
 */
#include "json.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- checking */

struct parser {
    const char *s;
    size_t n;
    const char *why; /* what Python's json module would say */
    size_t at;       /* where, in bytes */
};

static int fail_at(struct parser *ps, const char *why, size_t at)
{
    ps->why = why;
    ps->at = at;
    return -1;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static int parse_value(struct parser *ps, size_t i, int depth, size_t *end);

static int parse_string(struct parser *ps, size_t begin, size_t *end)
{
    const char *s = ps->s;
    size_t n = ps->n, i = begin + 1;
    for (;;) {
        while (i < n && s[i] != '"' && s[i] != '\\') {
            if ((unsigned char)s[i] < 0x20)
                return fail_at(ps, "Invalid control character at", i);
            i++;
        }
        if (i >= n)
            return fail_at(ps, "Unterminated string starting at", begin);
        if (s[i] == '"') {
            *end = i + 1;
            return 0;
        }
        if (++i >= n) /* a backslash ends the text */
            return fail_at(ps, "Unterminated string starting at", begin);
        switch (s[i]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            i++;
            continue;
        case 'u':
            break;
        default:
            return fail_at(ps, "Invalid \\escape", i - 1);
        }
        /* \uXXXX, i at the u; Python wants a character after the digits */
        unsigned cp, lo;
        if (i + 5 >= n || hex4(s + i + 1, &cp) < 0)
            return fail_at(ps, "Invalid \\uXXXX escape", i);
        i += 5;
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < n && s[i] == '\\' && s[i + 1] == 'u') {
            if (hex4(s + i + 2, &lo) < 0)
                return fail_at(ps, "Invalid \\uXXXX escape", i + 1);
            if (lo >= 0xDC00 && lo <= 0xDFFF)
                i += 6; /* a pair; otherwise the second is checked on its own */
        }
    }
}

/* Python's number pattern; a '.', 'e' not followed by digits is left for
 * the caller to trip on, as Python's scanner does. */
static int parse_number(struct parser *ps, size_t start, size_t *end)
{
    const char *s = ps->s;
    size_t n = ps->n, i = start;
    if (s[i] == '-' && ++i >= n)
        return fail_at(ps, "Expecting value", start);
    if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && is_digit(s[i]))
            i++;
    } else if (s[i] == '0') {
        i++;
    } else {
        return fail_at(ps, "Expecting value", start);
    }
    if (i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
        i += 2;
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i + 1 < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t e = i++;
        if (i + 1 < n && (s[i] == '-' || s[i] == '+'))
            i++;
        while (i < n && is_digit(s[i]))
            i++;
        if (!is_digit(s[i - 1]))
            i = e;
    }
    *end = i;
    return 0;
}

static int parse_object(struct parser *ps, size_t open, int depth, size_t *end)
{
    const char *s = ps->s;
    size_t n = ps->n, i;
    if (depth > GS_JSON_MAX_DEPTH)
        return fail_at(ps, "Nested deeper than " GS_JSON_DEPTH_TEXT " levels", open);
    i = skip_ws(s, n, open + 1);
    if (i >= n || s[i] != '}') {
        for (;;) {
            if (i >= n || s[i] != '"')
                return fail_at(ps, "Expecting property name enclosed in double quotes", i);
            if (parse_string(ps, i, &i) < 0)
                return -1;
            i = skip_ws(s, n, i);
            if (i >= n || s[i] != ':')
                return fail_at(ps, "Expecting ':' delimiter", i);
            i = skip_ws(s, n, i + 1);
            if (parse_value(ps, i, depth, &i) < 0)
                return -1;
            i = skip_ws(s, n, i);
            if (i < n && s[i] == '}')
                break;
            if (i >= n || s[i] != ',')
                return fail_at(ps, "Expecting ',' delimiter", i);
            i = skip_ws(s, n, i + 1);
        }
    }
    *end = i + 1;
    return 0;
}

static int parse_array(struct parser *ps, size_t open, int depth, size_t *end)
{
    const char *s = ps->s;
    size_t n = ps->n, i;
    if (depth > GS_JSON_MAX_DEPTH)
        return fail_at(ps, "Nested deeper than " GS_JSON_DEPTH_TEXT " levels", open);
    i = skip_ws(s, n, open + 1);
    if (i >= n || s[i] != ']') {
        for (;;) {
            if (parse_value(ps, i, depth, &i) < 0)
                return -1;
            i = skip_ws(s, n, i);
            if (i < n && s[i] == ']')
                break;
            if (i >= n || s[i] != ',')
                return fail_at(ps, "Expecting ',' delimiter", i);
            i = skip_ws(s, n, i + 1);
        }
    }
    *end = i + 1;
    return 0;
}

static int literal(const struct parser *ps, size_t i, const char *word)
{
    size_t k = strlen(word);
    return ps->n - i >= k && memcmp(ps->s + i, word, k) == 0;
}

static int parse_value(struct parser *ps, size_t i, int depth, size_t *end)
{
    if (i >= ps->n)
        return fail_at(ps, "Expecting value", i);
    const char *word = NULL;
    switch (ps->s[i]) {
    case '"':
        return parse_string(ps, i, end);
    case '{':
        return parse_object(ps, i, depth + 1, end);
    case '[':
        return parse_array(ps, i, depth + 1, end);
    case 'n':
        word = "null";
        break;
    case 't':
        word = "true";
        break;
    case 'f':
        word = "false";
        break;
    }
    if (word && literal(ps, i, word)) {
        *end = i + strlen(word);
        return 0;
    }
    return parse_number(ps, i, end);
}

/* Python decodes the bytes first (UTF-8, surrogates let through), and says
 * so in its UnicodeDecodeError's words. */
static int check_utf8(const unsigned char *s, size_t n, struct gs_str *err)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            gs_str_addf(err, "'utf-8' codec can't decode byte 0x%02x in position %zu: "
                        "invalid start byte", c, i);
            return -1;
        }
        for (size_t k = 1; k <= need; k++) {
            if (i + k >= n) {
                if (n - i == 1)
                    gs_str_addf(err, "'utf-8' codec can't decode byte 0x%02x in position "
                                "%zu: unexpected end of data", c, i);
                else
                    gs_str_addf(err, "'utf-8' codec can't decode bytes in position %zu-%zu: "
                                "unexpected end of data", i, n - 1);
                return -1;
            }
            unsigned b = s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) {
                gs_str_addf(err, "'utf-8' codec can't decode byte 0x%02x in position %zu: "
                            "invalid continuation byte", c, i);
                return -1;
            }
        }
        i += need + 1;
    }
    return 0;
}

static enum gs_json_type type_of(char c)
{
    switch (c) {
    case '"': return GS_JSON_STRING;
    case '{': return GS_JSON_OBJECT;
    case '[': return GS_JSON_ARRAY;
    case 'n': return GS_JSON_NULL;
    case 't': return GS_JSON_TRUE;
    case 'f': return GS_JSON_FALSE;
    default: return GS_JSON_NUMBER;
    }
}

int gs_json_parse(const char *text, size_t len, struct gs_json *root, struct gs_str *err)
{
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) { /* Python's utf-8-sig */
        text += 3;
        len -= 3;
    }
    if (check_utf8((const unsigned char *)text, len, err) < 0)
        return -1;
    struct parser ps = {text, len, NULL, 0};
    size_t start = skip_ws(text, len, 0), end = 0;
    if (parse_value(&ps, start, 0, &end) == 0) {
        size_t j = skip_ws(text, len, end);
        if (j == len) {
            root->p = text + start;
            root->len = end - start;
            root->type = type_of(text[start]);
            return 0;
        }
        fail_at(&ps, "Extra data", j);
    }
    /* Python counts characters, not bytes. */
    size_t pos = 0, line = 1;
    long long last_nl = -1;
    for (size_t i = 0; i < ps.at && i < len; i++) {
        if (((unsigned char)text[i] & 0xC0) == 0x80)
            continue;
        if (text[i] == '\n') {
            line++;
            last_nl = (long long)pos;
        }
        pos++;
    }
    gs_str_addf(err, "%s: line %zu column %lld (char %zu)", ps.why, line,
                (long long)pos - last_nl, pos);
    return -1;
}

/* ------------------------------------------------------------ accessors */

/* On checked text: the end of the string starting at s[i]. */
static size_t skip_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
            i++;
    return i < n ? i + 1 : n;
}

static size_t skip_value(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (s[i] == '"')
        return skip_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, n, i);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return n;
    }
    while (i < n && !is_ws(s[i]) && s[i] != ',' && s[i] != ']' && s[i] != '}')
        i++;
    return i;
}

int gs_json_next(const struct gs_json *c, size_t *cursor, struct gs_json *key,
                 struct gs_json *value)
{
    if (c->type != GS_JSON_ARRAY && c->type != GS_JSON_OBJECT)
        return 0;
    const char *s = c->p;
    size_t n = c->len, i;
    if (*cursor == 0) {
        i = skip_ws(s, n, 1);
    } else {
        i = skip_ws(s, n, *cursor);
        if (i >= n || s[i] != ',')
            return 0;
        i = skip_ws(s, n, i + 1);
    }
    if (i >= n || s[i] == ']' || s[i] == '}')
        return 0;
    if (c->type == GS_JSON_OBJECT) {
        size_t kend = skip_string(s, n, i);
        if (key) {
            key->p = s + i;
            key->len = kend - i;
            key->type = GS_JSON_STRING;
        }
        i = skip_ws(s, n, kend);
        i = skip_ws(s, n, i + 1); /* past the ':' */
    }
    size_t vend = skip_value(s, n, i);
    value->p = s + i;
    value->len = vend - i;
    value->type = type_of(i < n ? s[i] : '\0');
    *cursor = vend;
    return 1;
}

static void put_utf8(char *out, size_t cap, size_t *o, unsigned cp)
{
    unsigned char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        k = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    for (size_t j = 0; j < k; j++, (*o)++)
        if (*o < cap)
            out[*o] = (char)b[j];
}

/* Decode a checked string span into out (at most cap bytes); returns the
 * whole decoded length. */
static size_t decode(const char *p, size_t len, char *out, size_t cap)
{
    size_t i = 1, end = len ? len - 1 : 0, o = 0;
    while (i < end) {
        char c = p[i];
        if (c != '\\') {
            if (o < cap)
                out[o] = c;
            o++;
            i++;
            continue;
        }
        char e = p[i + 1];
        unsigned cp;
        i += 2;
        switch (e) {
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u': {
            if (i + 4 > end || hex4(p + i, &cp) < 0)
                return o; /* cannot happen on checked text */
            i += 4;
            unsigned lo;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= end && p[i] == '\\' &&
                p[i + 1] == 'u' && hex4(p + i + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            break;
        }
        default: cp = (unsigned char)e; break; /* " \ / */
        }
        put_utf8(out, cap, &o, cp);
    }
    return o;
}

static int key_is(const struct gs_json *k, const char *want)
{
    char buf[64];
    size_t n = strlen(want);
    if (n >= sizeof buf)
        return 0;
    return decode(k->p, k->len, buf, sizeof buf) == n && memcmp(buf, want, n) == 0;
}

int gs_json_member(const struct gs_json *obj, const char *key, struct gs_json *out)
{
    if (obj->type != GS_JSON_OBJECT)
        return 0;
    struct gs_json k, v;
    size_t cursor = 0;
    int found = 0;
    while (gs_json_next(obj, &cursor, &k, &v)) {
        if (key_is(&k, key)) {
            *out = v;
            found = 1;
        }
    }
    return found;
}

int gs_json_path(const struct gs_json *root, const char *path, struct gs_json *out)
{
    struct gs_json cur = *root;
    char name[64];
    while (*path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof name)
            return 0;
        memcpy(name, path, n);
        name[n] = '\0';
        if (!gs_json_member(&cur, name, &cur))
            return 0;
        path += n;
        if (*path == '.')
            path++;
    }
    *out = cur;
    return 1;
}

char *gs_json_string(const struct gs_json *v, size_t *len)
{
    if (v->type != GS_JSON_STRING)
        return NULL;
    size_t n = decode(v->p, v->len, NULL, 0);
    char *s = gs_xmalloc(n + 1);
    decode(v->p, v->len, s, n);
    s[n] = '\0';
    if (len)
        *len = n;
    return s;
}

size_t gs_json_string_into(const struct gs_json *v, char *out, size_t cap)
{
    if (v->type != GS_JSON_STRING)
        return 0;
    return decode(v->p, v->len, out, cap);
}

int gs_json_int64(const struct gs_json *v, int64_t *out)
{
    if (v->type != GS_JSON_NUMBER || memchr(v->p, '.', v->len) || memchr(v->p, 'e', v->len) ||
        memchr(v->p, 'E', v->len))
        return -1;
    size_t i = 0;
    int neg = v->p[0] == '-';
    if (neg)
        i++;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, x = 0;
    for (; i < v->len; i++) {
        unsigned d = (unsigned)(v->p[i] - '0');
        if (x > (limit - d) / 10)
            return 0;
        x = x * 10 + d;
    }
    if (neg)
        *out = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
    else
        *out = (int64_t)x;
    return 1;
}

int gs_json_truthy(const struct gs_json *v)
{
    switch (v->type) {
    case GS_JSON_NULL:
    case GS_JSON_FALSE:
        return 0;
    case GS_JSON_TRUE:
        return 1;
    case GS_JSON_STRING:
        return v->len > 2;
    case GS_JSON_ARRAY:
    case GS_JSON_OBJECT: {
        size_t i = skip_ws(v->p, v->len, 1);
        return i < v->len && v->p[i] != ']' && v->p[i] != '}';
    }
    case GS_JSON_NUMBER: {
        int64_t x;
        int r = gs_json_int64(v, &x);
        if (r >= 0) /* an integer: true unless every digit is 0 */
            return r == 0 || x != 0;
        char *copy = gs_xstrndup(v->p, v->len);
        double d = strtod(copy, NULL); /* 1e-400 is 0.0 for Python too */
        free(copy);
        return d != 0.0;
    }
    }
    return 0;
}
