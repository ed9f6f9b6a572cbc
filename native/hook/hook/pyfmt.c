/*
 * Python's repr() of str, int, float, bool, None, list and dict, and
 * json.dumps' string escapes (see pyfmt.h). Nothing here reads a file.
 */
#include "pyfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One code point of s[i..n); a byte that starts no valid sequence gives
 * 0xDC00 + byte, as Python's surrogateescape. Encoded surrogates are taken
 * as the code point (the JSON decoder writes lone \udXXX escapes so). */
static unsigned next_cp(const unsigned char *s, size_t n, size_t *i)
{
    unsigned c = s[*i];
    size_t need = 0;
    unsigned cp = 0, lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        cp = c & 0x0F;
        lo = c == 0xE0 ? 0xA0 : 0x80;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        cp = c & 0x07;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    if (need == 0 || n - *i <= need)
        goto bad;
    for (size_t k = 1; k <= need; k++) {
        unsigned b = s[*i + k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
            goto bad;
        cp = cp << 6 | (b & 0x3F);
    }
    *i += need + 1;
    return cp;
bad:
    (*i)++;
    return 0xDC00 + c;
}

/* Py_UNICODE_ISPRINTABLE, near enough: the non-printable ranges that a
 * message could plausibly meet (controls, format characters, separators,
 * surrogates, private use). */
static int printable(unsigned cp)
{
    static const unsigned ranges[][2] = {
        {0x80, 0xA0},       {0xAD, 0xAD},       {0x600, 0x605},     {0x61C, 0x61C},
        {0x6DD, 0x6DD},     {0x70F, 0x70F},     {0x1680, 0x1680},   {0x180E, 0x180E},
        {0x2000, 0x200F},   {0x2028, 0x202F},   {0x205F, 0x206F},   {0x3000, 0x3000},
        {0xD800, 0xF8FF},   {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0xFFFE, 0xFFFF},
        {0xE0001, 0xE007F}, {0xF0000, 0x10FFFF},
    };
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
        if (cp >= ranges[k][0] && cp <= ranges[k][1])
            return 0;
    return 1;
}

static void put_cp(struct gs_str *b, unsigned cp)
{
    char u[4];
    size_t k;
    if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    gs_str_addn(b, u, k);
}

static void repr_bytes(struct gs_str *b, const char *text, size_t n, size_t stop)
{
    const unsigned char *s = (const unsigned char *)text;
    char quote = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    gs_str_addc(b, quote);
    for (size_t i = 0; i < n && b->len <= stop;) {
        unsigned cp = next_cp(s, n, &i);
        if (cp == (unsigned)quote || cp == '\\') {
            gs_str_addc(b, '\\');
            gs_str_addc(b, (char)cp);
        } else if (cp == '\t') {
            gs_str_add(b, "\\t");
        } else if (cp == '\n') {
            gs_str_add(b, "\\n");
        } else if (cp == '\r') {
            gs_str_add(b, "\\r");
        } else if (cp < 0x20 || cp == 0x7F) {
            gs_str_addf(b, "\\x%02x", cp);
        } else if (cp < 0x7F) {
            gs_str_addc(b, (char)cp);
        } else if (printable(cp)) {
            put_cp(b, cp);
        } else if (cp <= 0xFF) {
            gs_str_addf(b, "\\x%02x", cp);
        } else if (cp <= 0xFFFF) {
            gs_str_addf(b, "\\u%04x", cp);
        } else {
            gs_str_addf(b, "\\U%08x", cp);
        }
    }
    gs_str_addc(b, quote);
}

/* repr(float): the shortest digits that read back as d, in fixed notation
 * for exponents -4..15, else d.ddde+XX. */
static void repr_float(struct gs_str *b, double d)
{
    if (isinf(d)) {
        gs_str_add(b, d > 0 ? "inf" : "-inf");
        return;
    }
    if (d == 0) {
        gs_str_add(b, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char buf[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    char digits[24];
    size_t nd = 0;
    const char *p = buf;
    if (*p == '-') {
        gs_str_addc(b, '-');
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < sizeof digits - 1)
            digits[nd++] = *p;
    digits[nd] = '\0';
    int exp = *p == 'e' ? atoi(p + 1) : 0;
    if (exp < -4 || exp >= 16) {
        gs_str_addc(b, digits[0]);
        if (nd > 1) {
            gs_str_addc(b, '.');
            gs_str_add(b, digits + 1);
        }
        gs_str_addf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        gs_str_add(b, "0.");
        for (int k = -1; k > exp; k--)
            gs_str_addc(b, '0');
        gs_str_add(b, digits);
    } else {
        for (int k = 0; k <= exp; k++)
            gs_str_addc(b, (size_t)k < nd ? digits[k] : '0');
        gs_str_addc(b, '.');
        gs_str_add(b, (size_t)exp + 1 < nd ? digits + exp + 1 : "0");
    }
}

static void repr_value(struct gs_str *b, const struct gs_json *v, size_t stop)
{
    if (b->len > stop)
        return;
    switch (v->type) {
    case GS_JSON_NULL:
        gs_str_add(b, "None");
        return;
    case GS_JSON_TRUE:
        gs_str_add(b, "True");
        return;
    case GS_JSON_FALSE:
        gs_str_add(b, "False");
        return;
    case GS_JSON_NUMBER: {
        int64_t x;
        if (gs_json_int64(v, &x) >= 0) { /* an int: its digits, -0 being 0 */
            if (v->len == 2 && memcmp(v->p, "-0", 2) == 0)
                gs_str_addc(b, '0');
            else
                gs_str_addn(b, v->p, v->len < stop ? v->len : stop);
            return;
        }
        char *copy = gs_xstrndup(v->p, v->len);
        repr_float(b, strtod(copy, NULL));
        free(copy);
        return;
    }
    case GS_JSON_STRING: {
        size_t n;
        char *s = gs_json_string(v, &n);
        repr_bytes(b, s, n, stop);
        free(s);
        return;
    }
    case GS_JSON_ARRAY:
    case GS_JSON_OBJECT: {
        int obj = v->type == GS_JSON_OBJECT;
        struct gs_json key, item;
        size_t cursor = 0;
        gs_str_addc(b, obj ? '{' : '[');
        for (int first = 1; b->len <= stop && gs_json_next(v, &cursor, &key, &item); first = 0) {
            if (!first)
                gs_str_add(b, ", ");
            if (obj) {
                repr_value(b, &key, stop);
                gs_str_add(b, ": ");
            }
            repr_value(b, &item, stop);
        }
        gs_str_addc(b, obj ? '}' : ']');
        return;
    }
    }
}

/* Past the limit: cut at a character boundary and say so. */
static void limit(struct gs_str *b, size_t start)
{
    if (b->len - start <= GS_REPR_LIMIT)
        return;
    size_t cut = start + GS_REPR_LIMIT;
    while (cut > start && ((unsigned char)b->s[cut] & 0xC0) == 0x80)
        cut--;
    gs_str_truncate(b, cut);
    gs_str_add(b, "...");
}

void gs_py_repr(struct gs_str *b, const struct gs_json *v)
{
    size_t start = b->len;
    repr_value(b, v, start + GS_REPR_LIMIT);
    limit(b, start);
}

void gs_py_repr_bytes(struct gs_str *b, const char *s, size_t n)
{
    size_t start = b->len;
    repr_bytes(b, s, n, start + GS_REPR_LIMIT);
    limit(b, start);
}

void gs_json_quote(struct gs_str *b, const char *s)
{
    size_t n = strlen(s);
    gs_str_addc(b, '"');
    for (size_t i = 0; i < n;) {
        unsigned cp = next_cp((const unsigned char *)s, n, &i);
        switch (cp) {
        case '"': gs_str_add(b, "\\\""); continue;
        case '\\': gs_str_add(b, "\\\\"); continue;
        case '\n': gs_str_add(b, "\\n"); continue;
        case '\r': gs_str_add(b, "\\r"); continue;
        case '\t': gs_str_add(b, "\\t"); continue;
        case '\b': gs_str_add(b, "\\b"); continue;
        case '\f': gs_str_add(b, "\\f"); continue;
        }
        if (cp >= 0x20 && cp < 0x7F)
            gs_str_addc(b, (char)cp);
        else if (cp < 0x10000)
            gs_str_addf(b, "\\u%04x", cp);
        else
            gs_str_addf(b, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                        0xDC00 + ((cp - 0x10000) & 0x3FF));
    }
    gs_str_addc(b, '"');
}
