/*
 * fakegpus.c: read the fake GPU description (see fakegpus.h).
 *
 * The JSON is checked and read by the hook's parser (native/hook/common/json.c,
 * built into each fake library with hidden visibility), then the checker
 * copies what it needs into fixed-size structs. Input is test data but the
 * fake libraries are loaded into real tools, so nothing here may crash on
 * bad input: size and depth are bounded and every error is a message.
 */
#define _GNU_SOURCE
#include "fakegpus.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json.h"
#include "util.h"

#define MAX_FILE_BYTES (16u << 20) /* far above any real description */

/* ------------------------------------------------------------------ checks */

typedef struct gs_json jval;

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
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s: %s: %s", c->path, key, msg);
    return -1;
}

/* A string value named in a message, as the hook names one: quoted, one
 * line, bounded. Into buf (cut to fit). */
static const char *shown(const char *s, char *buf, size_t size)
{
    char *q = gs_quoted(s, strlen(s), GS_AS_STRING);
    snprintf(buf, size, "%s", q);
    free(q);
    return buf;
}

/* obj's member key, or NULL (the last one if repeated). *out holds it. */
static const jval *member(const jval *obj, const char *key, jval *out)
{
    return gs_json_member(obj, key, out) ? out : NULL;
}

/* The number of elements of an array. */
static size_t length(const jval *arr)
{
    jval item;
    size_t cursor = 0, n = 0;
    while (gs_json_next(arr, &cursor, NULL, &item))
        n++;
    return n;
}

/* Element k of an array (k < length). */
static jval element(const jval *arr, size_t k)
{
    jval item = {0};
    size_t cursor = 0;
    for (size_t i = 0; i <= k && gs_json_next(arr, &cursor, NULL, &item); i++)
        ;
    return item;
}

/* An integer that fits int64, in *out. */
static bool integer(const jval *v, int64_t *out)
{
    return gs_json_int64(v, out) == 1;
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
    jval held;
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key, &held);
    if (!v)
        return required ? cfail(c, kn, "missing required key") : 0;
    if (v->type != GS_JSON_STRING)
        return cfail(c, kn, "expected a string");
    size_t n;
    char *s = gs_json_string(v, &n);
    int rc = 1;
    if (n == 0)
        rc = cfail(c, kn, "must not be empty");
    else if (strlen(s) != n)
        rc = cfail(c, kn, "must not hold \\u0000 (a C string ends there)");
    else if (n >= size)
        rc = cfail(c, kn, "longer than %zu bytes", size - 1);
    else
        memcpy(dst, s, n + 1);
    free(s);
    return rc;
}

static int get_int(const checker *c, const jval *obj, const char *where, const char *key,
                   bool required, int64_t min, int64_t max, int64_t *out)
{
    char kn[96];
    jval held;
    int64_t i;
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key, &held);
    if (!v)
        return required ? cfail(c, kn, "missing required key") : 0;
    if (!integer(v, &i) || i < min || i > max)
        return cfail(c, kn, "expected an integer from %lld to %lld", (long long)min,
                     (long long)max);
    *out = i;
    return 1;
}

static int get_bool(const checker *c, const jval *obj, const char *where, const char *key,
                    bool required, bool *out)
{
    char kn[96];
    jval held;
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key, &held);
    if (!v)
        return required ? cfail(c, kn, "missing required key") : 0;
    if (v->type != GS_JSON_TRUE && v->type != GS_JSON_FALSE)
        return cfail(c, kn, "expected true or false");
    *out = v->type == GS_JSON_TRUE;
    return 1;
}

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
    char kn[96], name[32];
    jval held;
    int64_t i;
    keyname(kn, sizeof(kn), where, key);
    const jval *v = member(obj, key, &held);
    if (!v)
        return 0;
    if (integer(v, &i) && i >= 0 && i <= (int64_t)UINT32_MAX) {
        *out = (unsigned)i;
        return 1;
    }
    size_t n = gs_json_string_into(v, name, sizeof(name) - 1);
    if (v->type == GS_JSON_STRING && n < sizeof(name) - 1) {
        name[n] = '\0';
        for (const named *t = table; t->name; t++) {
            if (strcasecmp(t->name, name) == 0) {
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
    char where[32], kn[96], q[160];
    int64_t n;
    int rc;
    snprintf(where, sizeof(where), "gpus[%u]", index);
    if (g->type != GS_JSON_OBJECT)
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
        return cfail(c, kn, "expected \"DDDDDDDD:BB:DD.F\" in hexadecimal, got %s",
                     shown(busid, q, sizeof(q)));
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

    /* What nvmlDeviceGetUtilizationRates reports (percent busy). */
    if ((rc = get_int(c, g, where, "utilization_pct", false, 0, 100, &n)) < 0)
        return -1;
    out->utilization_pct = rc ? (unsigned)n : 0;

    char cc[16] = "9.0"; /* an H200 */
    if (get_str(c, g, where, "compute_capability", false, cc, sizeof(cc)) < 0)
        return -1;
    keyname(kn, sizeof(kn), where, "compute_capability");
    if (!parse_major_minor(cc, &out->cc_major, &out->cc_minor))
        return cfail(c, kn, "expected \"MAJOR.MINOR\", got %s", shown(cc, q, sizeof(q)));

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
    /* What a context costs on this card (the fake libcuda's charge). */
    if ((rc = get_int(c, g, where, "context_mib", false, 0, (int64_t)out->memory_mib, &n)) < 0)
        return -1;
    out->has_context_mib = rc == 1;
    out->context_mib = rc ? (uint64_t)n : 0;
    return 0;
}

/* ------------------------------------------------------------- NVLink */

/* topology[k].nvlinks: how many NVLinks join the pair (level "nvlink" with
 * none given: one; any other level: its PCIe ancestor, NVLink beside it). */
static int check_nvlinks(const checker *c, const jval *e, const char *where, bool nvlink_level,
                         const unsigned idx[2], struct fakegpus *out)
{
    char kn[96];
    int64_t n = nvlink_level ? 1 : 0;
    int rc = get_int(c, e, where, "nvlinks", false, 0, FAKEGPUS_MAX_NVLINKS, &n);
    if (rc < 0)
        return -1;
    keyname(kn, sizeof(kn), where, "nvlinks");
    if (rc && nvlink_level && n == 0)
        return cfail(c, kn, "level \"nvlink\" needs at least one link");
    out->nvlinks[idx[0]][idx[1]] = out->nvlinks[idx[1]][idx[0]] = (unsigned char)n;
    return 0;
}

/* "nvswitch": {"gpus": [indexes], "links": N}: each listed card has N links
 * to NVSwitches, which join every pair of them. */
static int check_nvswitch(const checker *c, const jval *sw, struct fakegpus *out)
{
    jval held;
    if (sw->type != GS_JSON_OBJECT)
        return cfail(c, "nvswitch", "expected an object");
    int64_t links;
    if (get_int(c, sw, "nvswitch", "links", true, 1, FAKEGPUS_MAX_NVLINKS, &links) < 0)
        return -1;
    const jval *gpus = member(sw, "gpus", &held);
    if (!gpus)
        return cfail(c, "nvswitch.gpus", "missing required key");
    if (gpus->type != GS_JSON_ARRAY)
        return cfail(c, "nvswitch.gpus", "expected an array of GPU indexes");
    for (size_t k = 0; k < length(gpus); k++) {
        jval v = element(gpus, k);
        int64_t i;
        if (!integer(&v, &i) || i < 0 || i >= (int64_t)out->count)
            return cfail(c, "nvswitch.gpus", "expected GPU indexes below %u", out->count);
        out->nvswitch_links[i] = (unsigned char)links;
    }
    return 0;
}

/* The NVLink keys of the document, after the topology; a card's links in
 * all must fit NVML's link numbers. */
static int check_nvlink_doc(const checker *c, const jval *root, struct fakegpus *out)
{
    jval held;
    int64_t n = 8;
    if (get_int(c, root, "", "cpus_per_numa_node", false, 1, 1024, &n) < 0)
        return -1;
    out->cpus_per_numa_node = (unsigned)n;
    const jval *sw = member(root, "nvswitch", &held);
    if (sw && check_nvswitch(c, sw, out))
        return -1;
    for (unsigned a = 0; a < out->count; a++) {
        unsigned total = out->nvswitch_links[a];
        for (unsigned b = 0; b < out->count; b++)
            total += out->nvlinks[a][b];
        if (total > FAKEGPUS_MAX_NVLINKS) {
            char where[32];
            snprintf(where, sizeof(where), "gpus[%u]", a);
            return cfail(c, where, "has %u NVLinks in all, more than %d", total,
                         FAKEGPUS_MAX_NVLINKS);
        }
    }
    return 0;
}

static int check_topology(const checker *c, const jval *topo, struct fakegpus *out)
{
    if (topo->type != GS_JSON_ARRAY)
        return cfail(c, "topology", "expected an array");
    jval e, held;
    size_t cursor = 0;
    for (size_t k = 0; gs_json_next(topo, &cursor, NULL, &e); k++) {
        char where[32], kn[96], level[16], q[160];
        snprintf(where, sizeof(where), "topology[%zu]", k);
        if (e.type != GS_JSON_OBJECT)
            return cfail(c, where, "expected an object");
        keyname(kn, sizeof(kn), where, "gpus");
        const jval *pair = member(&e, "gpus", &held);
        if (!pair)
            return cfail(c, kn, "missing required key");
        if (pair->type != GS_JSON_ARRAY || length(pair) != 2)
            return cfail(c, kn, "expected two GPU indexes");
        unsigned idx[2];
        for (int j = 0; j < 2; j++) {
            jval v = element(pair, (size_t)j);
            int64_t i;
            if (!integer(&v, &i) || i < 0 || i >= (int64_t)out->count)
                return cfail(c, kn, "expected two GPU indexes below %u", out->count);
            idx[j] = (unsigned)i;
        }
        if (idx[0] == idx[1])
            return cfail(c, kn, "a GPU cannot be paired with itself");
        if (get_str(c, &e, where, "level", true, level, sizeof(level)) < 0)
            return -1;
        const named *t = link_names;
        while (t->name && strcmp(t->name, level) != 0)
            t++;
        keyname(kn, sizeof(kn), where, "level");
        if (!t->name)
            return cfail(c, kn, "unknown level %s (nvlink, internal, single, multiple, "
                                "hostbridge, node or system)", shown(level, q, sizeof(q)));
        out->link[idx[0]][idx[1]] = out->link[idx[1]][idx[0]] = (unsigned char)t->value;
        if (check_nvlinks(c, &e, where, t->value == FAKEGPU_LINK_NVLINK, idx, out))
            return -1;
    }
    return 0;
}

static int check_doc(const checker *c, const jval *root, struct fakegpus *out)
{
    if (root->type != GS_JSON_OBJECT)
        return cfail(c, "(top level)", "expected an object");
    if (get_str(c, root, "", "driver_version", true, out->driver_version,
                sizeof(out->driver_version)) < 0)
        return -1;
    char cuda[16], q[160];
    if (get_str(c, root, "", "cuda_version", true, cuda, sizeof(cuda)) < 0)
        return -1;
    if (!parse_major_minor(cuda, &out->cuda_major, &out->cuda_minor) || out->cuda_minor > 99)
        return cfail(c, "cuda_version", "expected \"MAJOR.MINOR\", got %s",
                     shown(cuda, q, sizeof(q)));

    jval held, item;
    const jval *gpus = member(root, "gpus", &held);
    if (!gpus)
        return cfail(c, "gpus", "missing required key");
    if (gpus->type != GS_JSON_ARRAY)
        return cfail(c, "gpus", "expected an array");
    size_t count = length(gpus), cursor = 0;
    if (count > FAKEGPUS_MAX_GPUS)
        return cfail(c, "gpus", "more than %d GPUs", FAKEGPUS_MAX_GPUS);
    out->count = (unsigned)count;
    for (unsigned k = 0; gs_json_next(gpus, &cursor, NULL, &item); k++) {
        if (check_gpu(c, &item, k, &out->gpus[k]))
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
    const jval *topo = member(root, "topology", &held);
    if (topo && check_topology(c, topo, out))
        return -1;
    return check_nvlink_doc(c, root, out);
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
    struct gs_json root;
    struct gs_str why = {0};
    int rc = gs_json_parse(text, len, &root, &why);
    if (rc != 0) {
        snprintf(err, errlen, "%s: invalid JSON: %s", path, gs_str_cstr(&why));
    } else {
        checker c = {path, err, errlen};
        rc = check_doc(&c, &root, out);
    }
    gs_str_free(&why);
    free(text);
    return rc;
}
