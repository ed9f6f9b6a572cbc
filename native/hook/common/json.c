/*
 * JSON in and out (see json.h). Three parts: gs_json_parse checks a whole
 * document against RFC 8259; the accessors rescan spans of a checked
 * document, so they can be simple and never fail; the writers escape.
 */
#include "json.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- UTF-8 */

size_t gs_utf8_at(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        c &= 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
        c &= 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
        c &= 0x07;
    } else {
        return 0;
    }
    if (n <= need)
        return 0;
    for (size_t k = 1; k <= need; k++) {
        unsigned b = s[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
            return 0;
        c = c << 6 | (b & 0x3F);
    }
    *cp = c;
    return need + 1;
}

static size_t put_utf8(char *out, size_t cap, size_t o, unsigned cp)
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
    for (size_t j = 0; j < k; j++, o++)
        if (o < cap)
            out[o] = (char)b[j];
    return o;
}

/* ------------------------------------------------------------- checking */

struct parser {
    const char *s;
    size_t n;
    const char *why; /* what was expected */
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
                return fail_at(ps, "expected an escape such as \\n or \\u001f, not a raw "
                                   "control character, in a string", i);
            i++;
        }
        if (i >= n)
            return fail_at(ps, "expected '\"' to close the string", begin);
        if (s[i] == '"') {
            *end = i + 1;
            return 0;
        }
        if (++i >= n) /* a backslash ends the text */
            return fail_at(ps, "expected '\"' to close the string", begin);
        unsigned cp;
        switch (s[i]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            i++;
            continue;
        case 'u':
            if (i + 4 >= n || hex4(s + i + 1, &cp) < 0)
                return fail_at(ps, "expected four hex digits after \\u", i - 1);
            i += 5;
            continue;
        default:
            return fail_at(ps, "expected an escape: one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t "
                               "\\uXXXX", i - 1);
        }
    }
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?; a leading 0 followed by a
 * digit ends the number there, for the caller to trip on the digit. */
static int parse_number(struct parser *ps, size_t start, size_t *end)
{
    const char *s = ps->s;
    size_t n = ps->n, i = start;
    if (s[i] == '-')
        i++;
    if (i >= n || !is_digit(s[i]))
        return fail_at(ps, i == start ? "expected a value" : "expected a digit after '-'", i);
    if (s[i++] != '0')
        while (i < n && is_digit(s[i]))
            i++;
    if (i < n && s[i] == '.') {
        if (++i >= n || !is_digit(s[i]))
            return fail_at(ps, "expected a digit after '.'", i);
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        if (i >= n || !is_digit(s[i]))
            return fail_at(ps, "expected a digit in the exponent", i);
        while (i < n && is_digit(s[i]))
            i++;
    }
    *end = i;
    return 0;
}

/* An array or an object at s[open]; depth counts this one. */
static int parse_container(struct parser *ps, size_t open, int depth, size_t *end)
{
    const char *s = ps->s;
    size_t n = ps->n, i;
    int obj = s[open] == '{';
    char close = obj ? '}' : ']';
    if (depth > GS_JSON_MAX_DEPTH)
        return fail_at(ps, "expected at most " GS_JSON_DEPTH_TEXT " levels of nesting", open);
    i = skip_ws(s, n, open + 1);
    if (i < n && s[i] == close) {
        *end = i + 1;
        return 0;
    }
    for (;;) {
        if (obj) {
            if (i >= n || s[i] != '"')
                return fail_at(ps, "expected a member name (a string in double quotes)", i);
            if (parse_string(ps, i, &i) < 0)
                return -1;
            i = skip_ws(s, n, i);
            if (i >= n || s[i] != ':')
                return fail_at(ps, "expected ':' after the member name", i);
            i = skip_ws(s, n, i + 1);
        }
        if (parse_value(ps, i, depth, &i) < 0)
            return -1;
        i = skip_ws(s, n, i);
        if (i < n && s[i] == close) {
            *end = i + 1;
            return 0;
        }
        if (i >= n || s[i] != ',')
            return fail_at(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'", i);
        i = skip_ws(s, n, i + 1);
    }
}

static int literal(const struct parser *ps, size_t i, const char *word)
{
    size_t k = strlen(word);
    return ps->n - i >= k && memcmp(ps->s + i, word, k) == 0;
}

static int parse_value(struct parser *ps, size_t i, int depth, size_t *end)
{
    if (i >= ps->n)
        return fail_at(ps, "expected a value", i);
    const char *word = NULL;
    switch (ps->s[i]) {
    case '"':
        return parse_string(ps, i, end);
    case '{':
    case '[':
        return parse_container(ps, i, depth + 1, end);
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
    if (word) {
        if (!literal(ps, i, word))
            return fail_at(ps, "expected a value", i);
        *end = i + strlen(word);
        return 0;
    }
    return parse_number(ps, i, end);
}

/* The first byte of s[0..n) that is not UTF-8, or n. */
static size_t utf8_bad(const char *s, size_t n)
{
    unsigned cp;
    for (size_t i = 0, k; i < n; i += k)
        if ((k = gs_utf8_at((const unsigned char *)s + i, n - i, &cp)) == 0)
            return i;
    return n;
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
    /* A UTF-8 byte order mark is skipped (RFC 8259 lets a parser); the
     * positions in messages count it. */
    size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    struct parser ps = {text + bom, len - bom, NULL, 0};
    char what[64];
    size_t bad = utf8_bad(ps.s, ps.n), start = skip_ws(ps.s, ps.n, 0), end = 0;
    if (bad < ps.n) {
        snprintf(what, sizeof what, "expected UTF-8, not byte 0x%02x,",
                 (unsigned char)ps.s[bad]);
        fail_at(&ps, what, bad);
    } else if (parse_value(&ps, start, 0, &end) == 0) {
        size_t j = skip_ws(ps.s, ps.n, end);
        if (j == ps.n) {
            root->p = ps.s + start;
            root->len = end - start;
            root->type = type_of(ps.s[start]);
            return 0;
        }
        fail_at(&ps, "expected nothing after the value", j);
    }
    /* Columns count characters: the text up to the error is UTF-8. */
    size_t line = 1, column = 1;
    for (size_t i = 0; i < ps.at; i++) {
        if (ps.s[i] == '\n') {
            line++;
            column = 1;
        } else if (((unsigned char)ps.s[i] & 0xC0) != 0x80) {
            column++;
        }
    }
    gs_str_addf(err, "%s at line %zu, column %zu (byte offset %zu)", ps.why, line, column,
                bom + ps.at);
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
    if (key)
        *key = (struct gs_json){NULL, 0, GS_JSON_NONE};
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
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD; /* a lone surrogate is no character */
            }
            break;
        }
        default: cp = (unsigned char)e; break; /* " \ / */
        }
        o = put_utf8(out, cap, o, cp);
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

/* -------------------------------------------------------------- writers */

enum escape_mode {
    ESCAPE_JSON,    /* a JSON string's inside: valid JSON whatever s holds */
    ESCAPE_MESSAGE, /* a string named in a message: a bad byte shows as \xNN */
    ESCAPE_LINE,    /* text kept as it is, '"' and '\\' too: only made one line */
};

/*
 * Append s[0..n) escaped; stop before the output passes `stop` bytes (at a
 * whole character or escape). Returns the input bytes consumed.
 */
static size_t escape(struct gs_str *b, const char *s, size_t n, enum escape_mode mode,
                     size_t stop)
{
    size_t i = 0;
    while (i < n) {
        char e[16];
        size_t k;
        unsigned cp;
        const char *out = e;
        size_t len = gs_utf8_at((const unsigned char *)s + i, n - i, &cp);
        if (len == 0) {
            k = 1;
            if (mode == ESCAPE_JSON)
                out = "\\ufffd";
            else
                snprintf(e, sizeof e, "\\x%02x", (unsigned char)s[i]);
        } else {
            k = len;
            switch (cp) {
            case '"': out = mode == ESCAPE_LINE ? "\"" : "\\\""; break;
            case '\\': out = mode == ESCAPE_LINE ? "\\" : "\\\\"; break;
            case '\b': out = "\\b"; break;
            case '\f': out = "\\f"; break;
            case '\n': out = "\\n"; break;
            case '\r': out = "\\r"; break;
            case '\t': out = "\\t"; break;
            default:
                /* gpuslice/text.h's rule: controls (NEL among them), line
                 * separators, bidi and invisible format characters. */
                if (gs_text_barred(cp))
                    snprintf(e, sizeof e, "\\u%04x", cp);
                else
                    out = NULL;
            }
        }
        size_t olen = out ? strlen(out) : k;
        if (b->len + olen > stop)
            break;
        gs_str_addn(b, out ? out : s + i, olen);
        i += k;
    }
    return i;
}

void gs_json_quote(struct gs_str *b, const char *s, size_t n)
{
    gs_str_addc(b, '"');
    escape(b, s, n, ESCAPE_JSON, SIZE_MAX);
    gs_str_addc(b, '"');
}

void gs_quote(struct gs_str *b, const char *s, size_t n, enum gs_quote_as as)
{
    if (as == GS_AS_PATH) {
        escape(b, s, n, ESCAPE_LINE, SIZE_MAX);
        return;
    }
    int string = as == GS_AS_STRING;
    if (string)
        gs_str_addc(b, '"');
    size_t done = escape(b, s, n, string ? ESCAPE_MESSAGE : ESCAPE_LINE, b->len + GS_QUOTE_MAX);
    if (done < n)
        gs_str_add(b, "...");
    if (string)
        gs_str_addc(b, '"');
}

char *gs_quoted(const char *s, size_t n, enum gs_quote_as as)
{
    struct gs_str b = {0};
    gs_quote(&b, s, n, as);
    return gs_str_take(&b);
}
