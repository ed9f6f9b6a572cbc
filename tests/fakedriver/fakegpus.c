/*
 * fakegpus.c: read the fake GPU description (see fakegpus.h).
 *
 * A small strict JSON parser (RFC 8259: objects, arrays, strings with every
 * escape, numbers, true/false/null) builds a tree, then the checker copies
 * what it needs into fixed-size structs. Input is test data but the fake
 * libraries are loaded into real tools, so nothing here may crash on bad
 * input: depth and size are bounded and every error is a message.
 */
#define _POSIX_C_SOURCE 200809L
#include "fakegpus.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_FILE_BYTES (16u << 20) /* far above any real description */
#define MAX_DEPTH 64               /* keeps the recursive parser's stack small */

/* ---------------------------------------------------------------- JSON tree */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype type;
    bool b;
    bool is_int;  /* a number with no fraction or exponent that fits int64 */
    int64_t i;
    char *s;      /* J_STR, NUL-terminated; \u0000 is refused */
    size_t n;     /* J_ARR / J_OBJ: number of items */
    struct jval *items;
    char **keys;  /* J_OBJ: keys[k] names items[k] */
} jval;

static void jfree(jval *v)
{
    if (v->type == J_STR)
        free(v->s);
    if (v->type == J_ARR || v->type == J_OBJ) {
        for (size_t k = 0; k < v->n; k++) {
            jfree(&v->items[k]);
            if (v->keys)
                free(v->keys[k]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof(*v));
}

typedef struct {
    const char *start, *p, *end;
    const char *path;
    char *err;
    size_t errlen;
    int depth;
} parser;

/* Report a syntax error with line and column, computed only on failure. */
static int perr(parser *ps, const char *what)
{
    unsigned line = 1, col = 1;
    for (const char *q = ps->start; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    snprintf(ps->err, ps->errlen, "%s: invalid JSON at line %u column %u: %s",
             ps->path, line, col, what);
    return -1;
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(parser *ps, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        if (ps->p >= ps->end)
            return perr(ps, "unterminated \\u escape");
        char c = *ps->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return perr(ps, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

/* Append one code point as UTF-8; the buffer always has room for 4 bytes. */
static size_t put_utf8(char *dst, unsigned cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ps->p is on the opening quote. The decoded text is never longer than the
 * escaped source, so one allocation of the source length is enough. */
static int parse_string(parser *ps, char **out)
{
    const char *q = ++ps->p;
    while (q < ps->end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= ps->end)
        return perr(ps, "unterminated string");
    char *buf = malloc((size_t)(q - ps->p) + 1);
    if (!buf)
        return perr(ps, "out of memory");
    size_t n = 0;
    for (;;) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20) {
            free(buf);
            return perr(ps, "control character in string");
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        char e = *ps->p++;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(ps, &cp)) {
                free(buf);
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    free(buf);
                    return perr(ps, "lone high surrogate in \\u escape");
                }
                ps->p += 2;
                if (hex4(ps, &lo)) {
                    free(buf);
                    return -1;
                }
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    free(buf);
                    return perr(ps, "bad low surrogate in \\u escape");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(buf);
                return perr(ps, "lone low surrogate in \\u escape");
            }
            if (cp == 0) {
                free(buf);
                return perr(ps, "\\u0000 is not allowed (C strings)");
            }
            /* \uXXXX takes 6 source bytes and gives at most 3 (or 12 -> 4). */
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            free(buf);
            ps->p--;
            return perr(ps, "unknown escape in string");
        }
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static int parse_number(parser *ps, jval *v)
{
    bool neg = false, overflow = false, integral = true;
    uint64_t mag = 0;
    if (ps->p < ps->end && *ps->p == '-') {
        neg = true;
        ps->p++;
    }
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return perr(ps, "bad number");
    if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9')
        return perr(ps, "leading zero in number");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        unsigned d = (unsigned)(*ps->p++ - '0');
        if (mag > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            mag = mag * 10 + d;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        integral = false;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return perr(ps, "digit expected after '.'");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integral = false;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return perr(ps, "digit expected in exponent");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    v->type = J_NUM;
    /* Only integers are ever used; other numbers parse but are flagged. */
    if (integral && !overflow && mag <= (uint64_t)INT64_MAX) {
        v->is_int = true;
        v->i = neg ? -(int64_t)mag : (int64_t)mag;
    }
    return 0;
}

static int parse_value(parser *ps, jval *v);

static int parse_container(parser *ps, jval *v, bool is_obj)
{
    char close = is_obj ? '}' : ']';
    size_t cap = 0;
    v->type = is_obj ? J_OBJ : J_ARR;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        if (v->n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            jval *items = realloc(v->items, ncap * sizeof(*items));
            if (!items)
                return perr(ps, "out of memory");
            v->items = items;
            if (is_obj) {
                char **keys = realloc(v->keys, ncap * sizeof(*keys));
                if (!keys)
                    return perr(ps, "out of memory");
                v->keys = keys;
            }
            cap = ncap;
        }
        jval *item = &v->items[v->n];
        memset(item, 0, sizeof(*item));
        if (is_obj) {
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"')
                return perr(ps, "object key (a string) expected");
            const char *keypos = ps->p;
            char *key;
            if (parse_string(ps, &key))
                return -1;
            for (size_t k = 0; k < v->n; k++) {
                if (strcmp(v->keys[k], key) == 0) {
                    free(key);
                    ps->p = keypos;
                    return perr(ps, "duplicate key in object");
                }
            }
            v->keys[v->n] = key;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                v->n++; /* so that jfree releases the key */
                return perr(ps, "':' expected after object key");
            }
            ps->p++;
        }
        v->n++; /* counted before parsing so that jfree sees partial items */
        if (parse_value(ps, item))
            return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return perr(ps, is_obj ? "',' or '}' expected" : "',' or ']' expected");
    }
}

static int literal(parser *ps, const char *word)
{
    size_t len = strlen(word);
    if ((size_t)(ps->end - ps->p) < len || memcmp(ps->p, word, len) != 0)
        return perr(ps, "unexpected character");
    ps->p += len;
    return 0;
}

static int parse_value(parser *ps, jval *v)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return perr(ps, "unexpected end of input");
    if (++ps->depth > MAX_DEPTH)
        return perr(ps, "nested too deeply");
    int rc;
    switch (*ps->p) {
    case '{': rc = parse_container(ps, v, true); break;
    case '[': rc = parse_container(ps, v, false); break;
    case '"':
        v->type = J_STR;
        rc = parse_string(ps, &v->s);
        break;
    case 't':
        v->type = J_BOOL;
        v->b = true;
        rc = literal(ps, "true");
        break;
    case 'f':
        v->type = J_BOOL;
        rc = literal(ps, "false");
        break;
    case 'n':
        rc = literal(ps, "null");
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            rc = parse_number(ps, v);
        else
            rc = perr(ps, "unexpected character");
    }
    ps->depth--;
    return rc;
}

/* ------------------------------------------------------------------ checks */

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
} checker;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int cfail(const checker *c, const char *key, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s: %s: %s", c->path, key, msg);
    return -1;
}

static const jval *member(const jval *obj, const char *key)
{
    for (size_t k = 0; k < obj->n; k++)
        if (strcmp(obj->keys[k], key) == 0)
            return &obj->items[k];
    return NULL;
}

/* Full key name for messages, e.g. "gpus[2].uuid". */
static void keyname(char *dst, size_t size, const char *where, const char *key)
{
    if (where[0])
        snprintf(dst, size, "%s.%s", where, key);
    else
        snprintf(dst, size, "%s", key);
}

/* Each getter: 1 = present and good, 0 = absent and optional, -1 = error. */
static int get_str(const checker *c, const jval *obj, const char *where, const char *key,
                   bool required, char *dst, size_t size)
{
    char kn[96];
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key);
    if (!v)
        return required ? cfail(c, kn, "missing required key") : 0;
    if (v->type != J_STR)
        return cfail(c, kn, "expected a string");
    if (v->s[0] == '\0')
        return cfail(c, kn, "must not be empty");
    if (strlen(v->s) >= size)
        return cfail(c, kn, "longer than %zu bytes", size - 1);
    memcpy(dst, v->s, strlen(v->s) + 1);
    return 1;
}

static int get_int(const checker *c, const jval *obj, const char *where, const char *key,
                   bool required, int64_t min, int64_t max, int64_t *out)
{
    char kn[96];
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key);
    if (!v)
        return required ? cfail(c, kn, "missing required key") : 0;
    if (v->type != J_NUM || !v->is_int || v->i < min || v->i > max)
        return cfail(c, kn, "expected an integer from %lld to %lld", (long long)min,
                     (long long)max);
    *out = v->i;
    return 1;
}

static int get_bool(const checker *c, const jval *obj, const char *where, const char *key,
                    bool required, bool *out)
{
    char kn[96];
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key);
    if (!v)
        return required ? cfail(c, kn, "missing required key") : 0;
    if (v->type != J_BOOL)
        return cfail(c, kn, "expected true or false");
    *out = v->b;
    return 1;
}

/* "MAJOR.MINOR" with plain decimal digits, as in "13.0" or "9.0". */
static bool parse_major_minor(const char *s, int *major, int *minor)
{
    int part[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        int digits = 0;
        while (*s >= '0' && *s <= '9' && digits < 4) {
            part[k] = part[k] * 10 + (*s++ - '0');
            digits++;
        }
        if (digits == 0)
            return false;
        if (k == 0 && *s++ != '.')
            return false;
    }
    if (*s != '\0')
        return false;
    *major = part[0];
    *minor = part[1];
    return true;
}

static int hexfield(const char **s, unsigned maxdigits, unsigned *out)
{
    unsigned v = 0, n = 0;
    for (;; n++) {
        char ch = **s;
        unsigned d;
        if (ch >= '0' && ch <= '9')
            d = (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            d = (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            d = (unsigned)(ch - 'A' + 10);
        else
            break;
        if (n == maxdigits)
            return -1;
        v = v * 16 + d;
        (*s)++;
    }
    if (n == 0)
        return -1;
    *out = v;
    return 0;
}

int fakegpus_parse_busid(const char *text, unsigned *domain, unsigned *bus,
                         unsigned *device, unsigned *function)
{
    unsigned f[3], fn = 0;
    const char *s = text;
    if (!s)
        return -1;
    if (hexfield(&s, 8, &f[0]) || *s++ != ':' || hexfield(&s, 8, &f[1]))
        return -1;
    if (*s == '.') { /* bus:device.function */
        s++;
        if (hexfield(&s, 1, &fn) || *s != '\0')
            return -1;
        f[2] = f[1];
        f[1] = f[0];
        f[0] = 0;
    } else {
        if (*s++ != ':' || hexfield(&s, 2, &f[2]))
            return -1;
        if (*s == '.') {
            s++;
            if (hexfield(&s, 1, &fn))
                return -1;
        }
        if (*s != '\0')
            return -1;
    }
    if (f[1] > 0xFF || f[2] > 0x1F || fn > 7)
        return -1;
    *domain = f[0];
    *bus = f[1];
    *device = f[2];
    *function = fn;
    return 0;
}

typedef struct {
    const char *name;
    unsigned value;
} named;

/* NVML's nvmlBrandType_t values. */
static const named brands[] = {
    {"unknown", 0}, {"quadro", 1}, {"tesla", 2}, {"nvs", 3}, {"grid", 4},
    {"geforce", 5}, {"titan", 6}, {"nvidia_vapps", 7}, {"nvidia_vpc", 8},
    {"nvidia_vcs", 9}, {"nvidia_vws", 10}, {"nvidia_cloud_gaming", 11},
    {"quadro_rtx", 12}, {"nvidia_rtx", 13}, {"nvidia", 14}, {"geforce_rtx", 15},
    {"titan_rtx", 16}, {NULL, 0}};

/* NVML's nvmlDeviceArchitecture_t values. */
#define ARCH_UNKNOWN 0xFFFFFFFFu
static const named archs[] = {
    {"kepler", 2}, {"maxwell", 3}, {"pascal", 4}, {"volta", 5}, {"turing", 6},
    {"ampere", 7}, {"ada", 8}, {"hopper", 9}, {"blackwell", 10}, {"rubin", 13},
    {"unknown", ARCH_UNKNOWN}, {NULL, 0}};

/* Brand and architecture: NVML's number, or its name from the table. */
static int get_enum(const checker *c, const jval *obj, const char *where, const char *key,
                    const named *table, unsigned *out)
{
    char kn[96];
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key);
    if (!v)
        return 0;
    if (v->type == J_NUM && v->is_int && v->i >= 0 && v->i <= (int64_t)UINT32_MAX) {
        *out = (unsigned)v->i;
        return 1;
    }
    if (v->type == J_STR) {
        for (const named *t = table; t->name; t++) {
            if (strcasecmp(t->name, v->s) == 0) {
                *out = t->value;
                return 1;
            }
        }
    }
    return cfail(c, kn, "expected NVML's number or one of its names (e.g. \"%s\")",
                 table[0].name);
}

/* What the real driver reports for a compute capability. */
static unsigned arch_from_cc(int major, int minor)
{
    switch (major) {
    case 3: return 2;
    case 5: return 3;
    case 6: return 4;
    case 7: return minor < 5 ? 5 : 6;
    case 8: return minor == 9 ? 8 : 7;
    case 9: return 9;
    case 10: case 11: case 12: return 10;
    default: return ARCH_UNKNOWN;
    }
}

static const named link_names[] = {
    {"internal", FAKEGPU_LINK_INTERNAL}, {"single", FAKEGPU_LINK_SINGLE},
    {"multiple", FAKEGPU_LINK_MULTIPLE}, {"hostbridge", FAKEGPU_LINK_HOSTBRIDGE},
    {"node", FAKEGPU_LINK_NODE},         {"system", FAKEGPU_LINK_SYSTEM},
    {"nvlink", FAKEGPU_LINK_NVLINK},     {NULL, 0}};

static int check_gpu(const checker *c, const jval *g, unsigned index, struct fakegpu *out)
{
    char where[32], kn[96];
    int64_t n;
    int rc;
    snprintf(where, sizeof(where), "gpus[%u]", index);
    if (g->type != J_OBJ)
        return cfail(c, where, "expected an object");
    memset(out, 0, sizeof(*out));

    if (get_str(c, g, where, "uuid", true, out->uuid, sizeof(out->uuid)) < 0 ||
        get_str(c, g, where, "name", true, out->name, sizeof(out->name)) < 0)
        return -1;
    /* Memory in MiB; the bound keeps bytes (MiB << 20) inside 64 bits. */
    if (get_int(c, g, where, "memory_mib", true, 1, (int64_t)1 << 40, &n) < 0)
        return -1;
    out->memory_mib = (uint64_t)n;
    if (get_int(c, g, where, "minor", true, 0, 255, &n) < 0)
        return -1;
    out->minor = (unsigned)n;
    if (get_bool(c, g, where, "mig", true, &out->mig) < 0)
        return -1;

    char busid[64];
    if (get_str(c, g, where, "pci_bus_id", true, busid, sizeof(busid)) < 0)
        return -1;
    keyname(kn, sizeof(kn), where, "pci_bus_id");
    if (fakegpus_parse_busid(busid, &out->pci_domain, &out->pci_bus, &out->pci_device,
                             &out->pci_function))
        return cfail(c, kn, "expected \"DDDDDDDD:BB:DD.F\" in hexadecimal, got \"%s\"", busid);
    snprintf(out->pci_bus_id, sizeof(out->pci_bus_id), "%08X:%02X:%02X.%X", out->pci_domain,
             out->pci_bus, out->pci_device, out->pci_function);

    out->numa_node = -1;
    if ((rc = get_int(c, g, where, "numa_node", false, -1, 1023, &n)) < 0)
        return -1;
    if (rc)
        out->numa_node = (int)n;

    char health[16] = "ok";
    if (get_str(c, g, where, "health", false, health, sizeof(health)) < 0)
        return -1;
    keyname(kn, sizeof(kn), where, "health");
    if (strcmp(health, "lost") == 0)
        out->lost = true;
    else if (strcmp(health, "ok") != 0)
        return cfail(c, kn, "expected \"ok\" or \"lost\"");

    if ((rc = get_int(c, g, where, "memory_used_mib", false, 0, (int64_t)out->memory_mib,
                      &n)) < 0)
        return -1;
    out->memory_used_mib = rc ? (uint64_t)n : 0;

    char cc[16] = "9.0"; /* an H200 */
    if (get_str(c, g, where, "compute_capability", false, cc, sizeof(cc)) < 0)
        return -1;
    keyname(kn, sizeof(kn), where, "compute_capability");
    if (!parse_major_minor(cc, &out->cc_major, &out->cc_minor))
        return cfail(c, kn, "expected \"MAJOR.MINOR\", got \"%s\"", cc);

    /* Real serials are 13 digits; the default keeps them unique per index. */
    snprintf(out->serial, sizeof(out->serial), "1654000000%03u", index);
    if (get_str(c, g, where, "serial", false, out->serial, sizeof(out->serial)) < 0)
        return -1;

    out->pci_device_id = 0x233510DEu; /* H200 SXM: device 0x2335, vendor NVIDIA */
    if ((rc = get_int(c, g, where, "pci_device_id", false, 0, UINT32_MAX, &n)) < 0)
        return -1;
    if (rc)
        out->pci_device_id = (unsigned)n;

    out->brand = 14; /* NVML_BRAND_NVIDIA, what data-centre cards report */
    if (get_enum(c, g, where, "brand", brands, &out->brand) < 0)
        return -1;
    out->architecture = arch_from_cc(out->cc_major, out->cc_minor);
    if (get_enum(c, g, where, "architecture", archs, &out->architecture) < 0)
        return -1;
    return 0;
}

static int check_topology(const checker *c, const jval *topo, struct fakegpus *out)
{
    if (topo->type != J_ARR)
        return cfail(c, "topology", "expected an array");
    for (size_t k = 0; k < topo->n; k++) {
        char where[32], kn[96];
        const jval *e = &topo->items[k];
        snprintf(where, sizeof(where), "topology[%zu]", k);
        if (e->type != J_OBJ)
            return cfail(c, where, "expected an object");
        keyname(kn, sizeof(kn), where, "gpus");
        const jval *pair = member(e, "gpus");
        if (!pair)
            return cfail(c, kn, "missing required key");
        if (pair->type != J_ARR || pair->n != 2)
            return cfail(c, kn, "expected two GPU indexes");
        unsigned idx[2];
        for (int j = 0; j < 2; j++) {
            const jval *v = &pair->items[j];
            if (v->type != J_NUM || !v->is_int || v->i < 0 || v->i >= (int64_t)out->count)
                return cfail(c, kn, "expected two GPU indexes below %u", out->count);
            idx[j] = (unsigned)v->i;
        }
        if (idx[0] == idx[1])
            return cfail(c, kn, "a GPU cannot be paired with itself");
        char level[16];
        if (get_str(c, e, where, "level", true, level, sizeof(level)) < 0)
            return -1;
        const named *t = link_names;
        while (t->name && strcmp(t->name, level) != 0)
            t++;
        keyname(kn, sizeof(kn), where, "level");
        if (!t->name)
            return cfail(c, kn, "unknown level \"%s\" (nvlink, internal, single, multiple, "
                                "hostbridge, node or system)", level);
        out->link[idx[0]][idx[1]] = out->link[idx[1]][idx[0]] = (unsigned char)t->value;
    }
    return 0;
}

static int check_doc(const checker *c, const jval *root, struct fakegpus *out)
{
    if (root->type != J_OBJ)
        return cfail(c, "(top level)", "expected an object");
    if (get_str(c, root, "", "driver_version", true, out->driver_version,
                sizeof(out->driver_version)) < 0)
        return -1;
    char cuda[16];
    if (get_str(c, root, "", "cuda_version", true, cuda, sizeof(cuda)) < 0)
        return -1;
    if (!parse_major_minor(cuda, &out->cuda_major, &out->cuda_minor) || out->cuda_minor > 99)
        return cfail(c, "cuda_version", "expected \"MAJOR.MINOR\", got \"%s\"", cuda);

    const jval *gpus = member(root, "gpus");
    if (!gpus)
        return cfail(c, "gpus", "missing required key");
    if (gpus->type != J_ARR)
        return cfail(c, "gpus", "expected an array");
    if (gpus->n > FAKEGPUS_MAX_GPUS)
        return cfail(c, "gpus", "more than %d GPUs", FAKEGPUS_MAX_GPUS);
    out->count = (unsigned)gpus->n;
    for (unsigned k = 0; k < out->count; k++) {
        if (check_gpu(c, &gpus->items[k], k, &out->gpus[k]))
            return -1;
        /* Lookups by UUID, bus id and minor must be unambiguous. */
        for (unsigned j = 0; j < k; j++) {
            char where[32];
            const struct fakegpu *a = &out->gpus[j], *b = &out->gpus[k];
            if (strcmp(a->uuid, b->uuid) == 0) {
                snprintf(where, sizeof(where), "gpus[%u].uuid", k);
                return cfail(c, where, "same as gpus[%u]", j);
            }
            if (strcmp(a->pci_bus_id, b->pci_bus_id) == 0) {
                snprintf(where, sizeof(where), "gpus[%u].pci_bus_id", k);
                return cfail(c, where, "same as gpus[%u]", j);
            }
            if (a->minor == b->minor) {
                snprintf(where, sizeof(where), "gpus[%u].minor", k);
                return cfail(c, where, "same as gpus[%u]", j);
            }
        }
    }
    for (unsigned a = 0; a < FAKEGPUS_MAX_GPUS; a++)
        for (unsigned b = 0; b < FAKEGPUS_MAX_GPUS; b++)
            out->link[a][b] = a == b ? FAKEGPU_LINK_INTERNAL : FAKEGPU_LINK_SYSTEM;
    const jval *topo = member(root, "topology");
    if (topo && check_topology(c, topo, out))
        return -1;
    return 0;
}

/* ------------------------------------------------------------------ loader */

const char *fakegpus_path(void)
{
    const char *p = getenv(FAKEGPUS_ENV);
    return (p && p[0]) ? p : FAKEGPUS_DEFAULT_PATH;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                snprintf(err, errlen, "%s: larger than %u bytes", path, MAX_FILE_BYTES);
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
                break;
            }
            fclose(f);
            *len = n;
            return buf;
        }
    }
    if (!buf || !err[0])
        snprintf(err, errlen, "%s: out of memory", path);
    free(buf);
    fclose(f);
    return NULL;
}

int fakegpus_load(const char *path, struct fakegpus *out, char *err, size_t errlen)
{
    char dummy[1];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    err[0] = '\0';
    if (!path)
        path = fakegpus_path();
    memset(out, 0, sizeof(*out));
    if (strlen(path) >= sizeof(out->path)) {
        snprintf(err, errlen, "%.200s...: path too long", path);
        return -1;
    }
    memcpy(out->path, path, strlen(path) + 1);

    size_t len;
    char *text = read_file(path, &len, err, errlen);
    if (!text)
        return -1;
    parser ps = {text, text, text + len, path, err, errlen, 0};
    jval root;
    memset(&root, 0, sizeof(root));
    int rc = parse_value(&ps, &root);
    if (rc == 0) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            rc = perr(&ps, "trailing data after the top-level value");
    }
    if (rc == 0) {
        checker c = {path, err, errlen};
        rc = check_doc(&c, &root, out);
    }
    jfree(&root);
    free(text);
    return rc;
}
