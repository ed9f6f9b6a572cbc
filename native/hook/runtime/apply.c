/*
 * The CDI edits applier of gpuslice-runtime (the rules are in apply.h).
 * config.json is the container author's: every shape it may have is
 * checked before it is used, and a shape no runtime accepts is one line.
 */
#include "apply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "json.h"
#include "util.h"

#define REQUEST_ENV "GPUSLICE="
#define REQUEST_ANNOTATION "gpuslice.io/request"
#define CDI_ANNOTATION_PREFIX "cdi.k8s.io/"
#define APPLIED_ANNOTATION "gpuslice.io/applied"

/* ------------------------------------------------------------ messages */

/* A value of config.json as a message shows it: a string between quotes,
 * anything else as JSON; one line, cut (malloc'ed). */
static char *shown(const json_t *v)
{
    if (json_is_string(v))
        return gs_quoted(json_string_value(v), json_string_length(v), GS_AS_STRING);
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    char *out = gs_quoted(text ? text : "?", text ? strlen(text) : 1, GS_AS_JSON);
    free(text);
    return out;
}

/* --------------------------------------------------------- the request */

struct names {
    char **v;
    size_t n, cap;
};

static void names_free(struct names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

static void names_add_once(struct names *l, char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], name) == 0) {
            free(name);
            return;
        }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->v = gs_xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = name;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/*
 * The devices of one comma-separated list: where says where it was ("env
 * GPUSLICE"); a plain name (no '=') is ours, qualified with kind, where
 * plain_ok, and refused elsewhere.
 */
static int add_list(struct names *out, const char *s, size_t n, const char *where,
                    const char *kind, int plain_ok)
{
    size_t i = 0;
    while (i < n && is_space(s[i]))
        i++;
    if (i == n) {
        char *q = gs_quoted(s, n, GS_AS_STRING);
        gs_fail("%s %s is not a comma-separated list of CDI devices", where, q);
        free(q);
        return GS_ERROR;
    }
    const char *p = s, *end = s + n;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *a = p, *b = comma ? comma : end;
        while (a < b && is_space(*a))
            a++;
        while (b > a && is_space(b[-1]))
            b--;
        if (a == b) {
            char *q = gs_quoted(s, n, GS_AS_STRING);
            gs_fail("%s: an empty device name in %s", where, q);
            free(q);
            return GS_ERROR;
        }
        size_t len = (size_t)(b - a);
        if (!memchr(a, '=', len)) {
            if (!plain_ok) {
                char *q = gs_quoted(a, len, GS_AS_STRING);
                gs_fail("%s: device %s is not fully qualified (vendor.com/class=name)", where, q);
                free(q);
                return GS_ERROR;
            }
            struct gs_str name = {0};
            gs_str_add(&name, kind);
            gs_str_addc(&name, '=');
            gs_str_addn(&name, a, len);
            names_add_once(out, gs_str_take(&name));
        } else {
            names_add_once(out, gs_xstrndup(a, len));
        }
        if (!comma)
            return GS_OK;
        p = comma + 1;
    }
}

static int add_annotation(struct names *out, const char *key, const json_t *v, const char *kind,
                          int plain_ok)
{
    struct gs_str where = {0};
    gs_str_add(&where, "annotation ");
    gs_quote(&where, key, strlen(key), GS_AS_PATH);
    int rc;
    if (!json_is_string(v)) {
        char *q = shown(v);
        rc = gs_fail("%s %s is not a comma-separated list of CDI devices", where.s, q);
        free(q);
    } else {
        rc = add_list(out, json_string_value(v), json_string_length(v), where.s, kind, plain_ok);
    }
    gs_str_free(&where);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The fully qualified devices config asks for, in order, each once. */
static int requested(const json_t *config, const char *kind, struct names *out)
{
    const json_t *process = json_object_get(config, "process");
    const json_t *env = json_object_get(process, "env"), *v;
    size_t i, prefix = strlen(REQUEST_ENV);
    const json_t *last = NULL; /* the entry the process gets (apply_env says why) */
    json_array_foreach(env, i, v) {
        const char *s = json_string_value(v);
        if (s && json_string_length(v) >= prefix && memcmp(s, REQUEST_ENV, prefix) == 0)
            last = v;
    }
    if (last && add_list(out, json_string_value(last) + prefix,
                         json_string_length(last) - prefix, "env GPUSLICE", kind, 1) != GS_OK)
        return GS_ERROR;
    const json_t *anns = json_object_get(config, "annotations");
    if (!anns || json_is_null(anns))
        return GS_OK;
    if (!json_is_object(anns))
        return gs_fail("config.json annotations is not an object");
    v = json_object_get(anns, REQUEST_ANNOTATION);
    if (v && add_annotation(out, REQUEST_ANNOTATION, v, kind, 1) != GS_OK)
        return GS_ERROR;
    size_t n = 0, plen = strlen(CDI_ANNOTATION_PREFIX);
    const char *key;
    json_object_foreach((json_t *)anns, key, v)
        n += strncmp(key, CDI_ANNOTATION_PREFIX, plen) == 0;
    if (!n)
        return GS_OK;
    const char **keys = gs_xmalloc(n * sizeof *keys);
    n = 0;
    json_object_foreach((json_t *)anns, key, v)
        if (strncmp(key, CDI_ANNOTATION_PREFIX, plen) == 0)
            keys[n++] = key;
    qsort(keys, n, sizeof *keys, by_name);
    int rc = GS_OK;
    for (i = 0; i < n && rc == GS_OK; i++)
        rc = add_annotation(out, keys[i], json_object_get(anns, keys[i]), kind, 0);
    free(keys);
    return rc;
}

/* ------------------------------------------------------------ resolving */

/* "a, b, c" of an array of strings. */
static void joined(struct gs_str *b, const json_t *list, const char *sep)
{
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v) {
        if (i)
            gs_str_add(b, sep);
        gs_str_add(b, json_string_value(v) ? json_string_value(v) : "?");
    }
}

/* A device name from config.json, for a message: one line. */
static void add_name(struct gs_str *b, const char *name, size_t n)
{
    gs_quote(b, name, n, GS_AS_PATH);
}

static int unknown(const json_t *cache, const char *name)
{
    struct gs_str kind = {0}, msg = {0};
    size_t kind_len = strcspn(name, "=");
    gs_str_addn(&kind, name, kind_len);
    const json_t *offered = json_object_get(json_object_get(cache, "offers"), kind.s);
    gs_str_add(&msg, "unknown CDI device ");
    add_name(&msg, name, strlen(name));
    gs_str_add(&msg, "; ");
    if (json_array_size(offered)) {
        gs_str_addf(&msg, "%s offers: ", kind.s); /* the cache's: a valid kind */
        joined(&msg, offered, ", ");
    } else {
        gs_str_add(&msg, "no spec offers kind ");
        add_name(&msg, name, kind_len);
    }
    const json_t *errors = json_object_get(cache, "errors");
    if (json_array_size(errors)) {
        gs_str_add(&msg, "; invalid spec files skipped: ");
        joined(&msg, errors, "; ");
    }
    int rc = gs_fail("%s", msg.s);
    gs_str_free(&kind);
    gs_str_free(&msg);
    return rc;
}

/* The edits to apply, in order: each spec's own with its first device,
 * then the device's. Borrowed from cache; *n of them. */
static int resolve(const json_t *cache, const struct names *want, const json_t ***edits,
                   size_t *n)
{
    const json_t *devices = json_object_get(cache, "devices"),
                 *conflicts = json_object_get(cache, "conflicts"),
                 *specs = json_object_get(cache, "specs");
    size_t nspecs = json_array_size(specs);
    char *spec_used = calloc(nspecs ? nspecs : 1, 1);
    const json_t **out = gs_xmalloc(2 * want->n * sizeof *out);
    size_t k = 0;
    if (!spec_used)
        return gs_fail("out of memory");
    for (size_t i = 0; i < want->n; i++) {
        const char *name = want->v[i];
        const json_t *clash = json_object_get(conflicts, name);
        if (clash) {
            struct gs_str files = {0};
            joined(&files, clash, ", ");
            gs_fail("CDI device %s is defined by more than one spec of the same priority (%s); "
                    "remove one",
                    name, gs_str_cstr(&files));
            gs_str_free(&files);
            goto fail;
        }
        const json_t *dev = json_object_get(devices, name);
        if (!dev) {
            unknown(cache, name);
            goto fail;
        }
        json_int_t s = json_integer_value(json_object_get(dev, "spec"));
        if (s >= 0 && (size_t)s < nspecs && !spec_used[s]) {
            spec_used[s] = 1;
            out[k++] = json_array_get(specs, (size_t)s);
        }
        out[k++] = json_object_get(dev, "edits");
    }
    free(spec_used);
    *edits = out;
    *n = k;
    return GS_OK;
fail:
    free(spec_used);
    free(out);
    return GS_ERROR;
}

/* ------------------------------------------------- config.json's shapes */

/* obj[key], made an empty object or array if absent (or null); NULL (the
 * message set) if it is something else. */
static json_t *member(json_t *obj, const char *key, int want_array, const char *where)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        v = want_array ? json_array() : json_object();
        json_object_set_new(obj, key, v);
        return v;
    }
    if (want_array ? json_is_array(v) : json_is_object(v))
        return v;
    gs_fail("config.json %s is not %s", where, want_array ? "an array" : "an object");
    return NULL;
}

/* Is obj[key] absent, null or of the type wanted? The message otherwise. */
static int shape(const json_t *obj, const char *key, int want_array, const char *where)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v) || (want_array ? json_is_array(v) : json_is_object(v)))
        return GS_OK;
    return gs_fail("config.json %s is not %s", where, want_array ? "an array" : "an object");
}

/* Every element of an array of objects has key absent or a string. */
static int entries_shape(const json_t *list, const char *key, const char *where)
{
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v) {
        const json_t *s = json_object_get(v, key);
        if (!json_is_object(v) || (s && !json_is_string(s)))
            return gs_fail("config.json %s[%zu] is not an object with a string %s", where, i,
                           key);
    }
    return GS_OK;
}

/* Everything the edits will touch has a shape they can be applied to. */
static int config_shapes(const json_t *config, int env, int gids, int linux, int mounts,
                         int hooks)
{
    const json_t *process = json_object_get(config, "process"), *v;
    size_t i;
    if (shape(config, "process", 0, "process") || shape(config, "linux", 0, "linux") ||
        shape(config, "mounts", 1, "mounts") || shape(config, "hooks", 0, "hooks") ||
        shape(process, "user", 0, "process.user"))
        return GS_ERROR;
    if (env) {
        if (shape(process, "env", 1, "process.env"))
            return GS_ERROR;
        json_array_foreach(json_object_get(process, "env"), i, v)
            if (!json_is_string(v))
                return gs_fail("config.json process.env[%zu] is not a string", i);
    }
    const json_t *user = json_object_get(process, "user");
    if (gids && shape(user, "additionalGids", 1, "process.user.additionalGids"))
        return GS_ERROR;
    const json_t *lx = json_object_get(config, "linux");
    if (linux && (shape(lx, "devices", 1, "linux.devices") ||
                  entries_shape(json_object_get(lx, "devices"), "path", "linux.devices") ||
                  shape(lx, "resources", 0, "linux.resources") ||
                  shape(json_object_get(lx, "resources"), "devices", 1,
                        "linux.resources.devices") ||
                  shape(lx, "netDevices", 0, "linux.netDevices")))
        return GS_ERROR;
    if (mounts && entries_shape(json_object_get(config, "mounts"), "destination", "mounts"))
        return GS_ERROR;
    if (hooks) {
        const char *name;
        json_object_foreach((json_t *)json_object_get(config, "hooks"), name, v)
            if (!json_is_array(v) && !json_is_null(v)) {
                char *q = gs_quoted(name, strlen(name), GS_AS_STRING); /* the author's key */
                gs_fail("config.json hooks %s is not an array", q);
                free(q);
                return GS_ERROR;
            }
    }
    return GS_OK;
}

/* ------------------------------------------------------------ the edits */

struct node {
    const json_t *spec; /* the CDI device node */
    char type;
    json_int_t major, minor;
};

static const char *str_or(const json_t *obj, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : dflt;
}

/* Type, major and minor of a node: the spec's, or the host node's. */
static int node_info(const json_t *n, gs_rt_stat_fn stat_fn, struct node *out)
{
    const char *type = str_or(n, "type", "");
    json_int_t major = json_integer_value(json_object_get(n, "major"));
    out->spec = n;
    if (*type && (major || strcmp(type, "p") == 0)) {
        out->type = type[0];
        out->major = major;
        out->minor = json_integer_value(json_object_get(n, "minor"));
        return GS_OK;
    }
    const char *host = str_or(n, "hostPath", "");
    if (!*host)
        host = str_or(n, "path", "");
    struct stat st;
    if (stat_fn(host, &st) != 0) {
        struct gs_str what = {0};
        gs_str_addf(&what, "device node %s", host);
        gs_fail_errno(what.s, errno);
        gs_str_free(&what);
        char *why = gs_message_take();
        gs_fail("%s; the CDI spec names a node this host does not have (regenerate the spec?)",
                why);
        free(why);
        return GS_ERROR;
    }
    char kind = S_ISCHR(st.st_mode) ? 'c' : S_ISBLK(st.st_mode) ? 'b' : S_ISFIFO(st.st_mode) ? 'p'
                                                                                            : 0;
    if (!kind)
        return gs_fail("device node %s is not a device (nor a fifo)", host);
    if (*type && type[0] != kind && !(type[0] == 'u' && kind == 'c'))
        return gs_fail("device node %s: the spec says type '%s', the host has '%c'", host, type,
                       kind);
    out->type = kind;
    out->major = major(st.st_rdev);
    out->minor = minor(st.st_rdev);
    return GS_OK;
}

static size_t key_len(const char *entry)
{
    return strcspn(entry, "=");
}

/* Each of add's entries sets its name wholly: it takes the place of the
 * name's first entry and the others go, so the process (runc: the last entry
 * wins), the hook and the shim all see the spec's value. */
static void apply_env(json_t *env, const json_t *add)
{
    size_t i;
    const json_t *e;
    json_array_foreach(add, i, e) {
        const char *s = json_string_value(e);
        if (!s)
            continue;
        size_t k = key_len(s);
        int replaced = 0;
        for (size_t j = 0; j < json_array_size(env);) {
            const char *h = json_string_value(json_array_get(env, j));
            if (!h || key_len(h) != k || strncmp(h, s, k) != 0) {
                j++;
            } else if (!replaced) {
                json_array_set_new(env, j++, json_string(s));
                replaced = 1;
            } else {
                json_array_remove(env, j);
            }
        }
        if (!replaced)
            json_array_append_new(env, json_string(s));
    }
}

/* Remove every element of list whose key is the string s. */
static void remove_where(json_t *list, const char *key, const char *s)
{
    for (size_t i = json_array_size(list); i-- > 0;) {
        const char *v = json_string_value(json_object_get(json_array_get(list, i), key));
        if (v && strcmp(v, s) == 0)
            json_array_remove(list, i);
    }
}

static void apply_node(json_t *linux, const struct node *n, const json_t *user)
{
    const char *path = str_or(n->spec, "path", "");
    char type[2] = {n->type, 0};
    json_t *dev = json_pack("{s:s, s:s, s:I, s:I}", "path", path, "type", type, "major",
                            n->major, "minor", n->minor);
    const json_t *mode = json_object_get(n->spec, "fileMode");
    if (mode)
        json_object_set(dev, "fileMode", (json_t *)mode);
    static const char *const ids[] = {"uid", "gid"};
    for (int i = 0; i < 2; i++) {
        const json_t *id = json_object_get(n->spec, ids[i]);
        const json_t *own = json_object_get(user, ids[i]);
        if (!id && json_integer_value(own)) /* root's (0) is left out */
            id = own;
        if (id)
            json_object_set(dev, ids[i], (json_t *)id);
    }
    json_t *devices = json_object_get(linux, "devices");
    remove_where(devices, "path", path);
    json_array_append_new(devices, dev);
    if (n->type == 'b' || n->type == 'c') {
        const char *perm = str_or(n->spec, "permissions", "");
        const char *access = !*perm ? "rwm" : strcmp(perm, "none") == 0 ? "" : perm;
        json_t *rules = json_object_get(json_object_get(linux, "resources"), "devices");
        json_array_append_new(rules, json_pack("{s:b, s:s, s:I, s:I, s:s}", "allow", 1, "type",
                                               type, "major", n->major, "minor", n->minor,
                                               "access", access));
    }
}

/* posixpath.normpath: "." for "", "//" kept as POSIX allows, "." and ".."
 * resolved without the file system. malloc'ed. */
static char *normpath(const char *p)
{
    size_t n = strlen(p);
    if (!n)
        return gs_xstrdup(".");
    int lead = p[0] == '/' ? (p[1] == '/' && p[2] != '/' ? 2 : 1) : 0;
    /* The components kept, as offsets into a copy cut at each '/'. */
    char *copy = gs_xstrdup(p);
    char **comp = gs_xmalloc((n / 2 + 2) * sizeof *comp);
    size_t k = 0;
    for (char *save = NULL, *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") != 0 || (!lead && !k) || (k && strcmp(comp[k - 1], "..") == 0))
            comp[k++] = c;
        else if (k)
            k--;
    }
    struct gs_str b = {0};
    for (int i = 0; i < lead; i++)
        gs_str_addc(&b, '/');
    for (size_t i = 0; i < k; i++) {
        if (i)
            gs_str_addc(&b, '/');
        gs_str_add(&b, comp[i]);
    }
    if (!b.len)
        gs_str_addc(&b, '.');
    free(comp);
    free(copy);
    return gs_str_take(&b);
}

struct placed {
    json_t *mount;
    char *dest; /* normalised */
    size_t depth, at;
};

static int mount_order(const void *a, const void *b)
{
    const struct placed *x = a, *y = b;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    int c = strcmp(x->dest, y->dest);
    if (c)
        return c;
    return x->at < y->at ? -1 : x->at > y->at; /* a stable sort */
}

static void sort_mounts(json_t *mounts)
{
    size_t n = json_array_size(mounts);
    if (n < 2)
        return;
    struct placed *p = gs_xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        p[i].mount = json_incref(json_array_get(mounts, i));
        p[i].dest = normpath(str_or(p[i].mount, "destination", ""));
        p[i].at = i;
        p[i].depth = 0;
        for (const char *c = p[i].dest; *c; c++)
            p[i].depth += *c == '/';
    }
    qsort(p, n, sizeof *p, mount_order);
    json_array_clear(mounts);
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(mounts, p[i].mount);
        free(p[i].dest);
    }
    free(p);
}

static void apply_mount(json_t *mounts, const json_t *m)
{
    const char *dest = str_or(m, "containerPath", "");
    remove_where(mounts, "destination", dest);
    json_t *oci = json_pack("{s:s, s:s}", "destination", dest, "source", str_or(m, "hostPath", ""));
    const char *type = str_or(m, "type", "");
    if (*type)
        json_object_set_new(oci, "type", json_string(type));
    const json_t *options = json_object_get(m, "options");
    if (json_array_size(options))
        json_object_set_new(oci, "options", json_deep_copy(options));
    json_array_append_new(mounts, oci);
}

static void apply_hook(json_t *hooks, const json_t *h)
{
    const char *name = str_or(h, "hookName", "");
    json_t *list = json_object_get(hooks, name);
    if (!json_is_array(list)) {
        list = json_array();
        json_object_set_new(hooks, name, list);
    }
    json_t *oci = json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)h, key, v)
        if (strcmp(key, "hookName") != 0)
            json_object_set_new(oci, key, json_deep_copy(v));
    json_array_append_new(list, oci);
}

static void apply_gids(json_t *gids, const json_t *add)
{
    size_t i, j;
    const json_t *g, *have;
    json_array_foreach(add, i, g) {
        json_int_t id = json_integer_value(g);
        int present = !id;
        json_array_foreach(gids, j, have)
            present |= json_is_integer(have) && json_integer_value(have) == id;
        if (!present)
            json_array_append_new(gids, json_integer(id));
    }
}

/* The count of a category's entries across all the edits. */
static size_t count(const json_t *const *edits, size_t n, const char *key)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += json_array_size(json_object_get(edits[i], key));
    return total;
}

static int apply_edits(json_t *config, const json_t *const *edits, size_t n,
                       gs_rt_stat_fn stat_fn)
{
    size_t nodes_n = count(edits, n, "deviceNodes"), i, j, k = 0;
    size_t env_n = count(edits, n, "env"), gids_n = count(edits, n, "additionalGids");
    size_t mounts_n = count(edits, n, "mounts"), hooks_n = count(edits, n, "hooks");
    size_t net_n = count(edits, n, "netDevices");
    const json_t *rdt = NULL, *v;
    for (i = 0; i < n; i++)
        if (json_object_get(edits[i], "intelRdt"))
            rdt = json_object_get(edits[i], "intelRdt");

    /* Everything that can fail first, so that a failure leaves config as it was. */
    if (config_shapes(config, env_n > 0, gids_n > 0, nodes_n || net_n || rdt, mounts_n > 0,
                      hooks_n > 0) != GS_OK)
        return GS_ERROR;
    struct node *nodes = gs_xmalloc((nodes_n ? nodes_n : 1) * sizeof *nodes);
    for (i = 0; i < n; i++)
        json_array_foreach(json_object_get(edits[i], "deviceNodes"), j, v)
            if (node_info(v, stat_fn, &nodes[k++]) != GS_OK) {
                free(nodes);
                return GS_ERROR;
            }

    json_t *process = (env_n || gids_n) ? member(config, "process", 0, "process")
                                        : json_object_get(config, "process");
    const json_t *user = json_object_get(process, "user");
    if (env_n) {
        json_t *env = member(process, "env", 1, "process.env");
        for (i = 0; i < n; i++)
            apply_env(env, json_object_get(edits[i], "env"));
    }
    if (nodes_n || net_n || rdt) {
        json_t *linux = member(config, "linux", 0, "linux");
        if (nodes_n) {
            member(linux, "devices", 1, "linux.devices");
            member(member(linux, "resources", 0, "linux.resources"), "devices", 1,
                   "linux.resources.devices");
            for (k = 0; k < nodes_n; k++)
                apply_node(linux, &nodes[k], user);
        }
        if (net_n) {
            json_t *net = member(linux, "netDevices", 0, "linux.netDevices");
            for (i = 0; i < n; i++)
                json_array_foreach(json_object_get(edits[i], "netDevices"), j, v)
                    json_object_set_new(net, str_or(v, "hostInterfaceName", ""),
                                        json_pack("{s:s}", "name", str_or(v, "name", "")));
        }
        if (rdt)
            json_object_set_new(linux, "intelRdt", json_deep_copy(rdt));
    }
    if (mounts_n) {
        json_t *mounts = member(config, "mounts", 1, "mounts");
        for (i = 0; i < n; i++)
            json_array_foreach(json_object_get(edits[i], "mounts"), j, v)
                apply_mount(mounts, v);
        sort_mounts(mounts);
    }
    if (hooks_n) {
        json_t *hooks = member(config, "hooks", 0, "hooks");
        for (i = 0; i < n; i++)
            json_array_foreach(json_object_get(edits[i], "hooks"), j, v)
                apply_hook(hooks, v);
    }
    if (gids_n) {
        json_t *gids = member(member(process, "user", 0, "process.user"), "additionalGids", 1,
                              "process.user.additionalGids");
        for (i = 0; i < n; i++)
            apply_gids(gids, json_object_get(edits[i], "additionalGids"));
    }
    free(nodes);
    return GS_OK;
}

/* ------------------------------------------------------------------ all */

int gs_rt_apply(json_t *config, const json_t *cache, gs_rt_stat_fn stat_fn)
{
    if (!json_is_object(config))
        return gs_fail("config.json is not a JSON object");
    const char *kind = str_or(cache, "kind", "gpuslice.io/gpu");
    struct names want = {0};
    if (requested(config, kind, &want) != GS_OK) {
        names_free(&want);
        return GS_ERROR;
    }
    if (!want.n) {
        names_free(&want);
        return GS_NO;
    }
    struct gs_str applied = {0};
    for (size_t i = 0; i < want.n; i++) {
        if (i)
            gs_str_addc(&applied, ',');
        gs_str_add(&applied, want.v[i]);
    }
    const char *before = str_or(json_object_get(config, "annotations"), APPLIED_ANNOTATION, NULL);
    int rc = GS_NO;
    const json_t **edits = NULL;
    size_t n = 0;
    if (before && strcmp(before, applied.s) == 0)
        goto done; /* a retried create */
    rc = resolve(cache, &want, &edits, &n);
    if (rc == GS_OK)
        rc = apply_edits(config, edits, n, stat_fn);
    if (rc == GS_OK)
        json_object_set_new(member(config, "annotations", 0, "annotations"), APPLIED_ANNOTATION,
                            json_string(applied.s));
done:
    free(edits);
    gs_str_free(&applied);
    names_free(&want);
    return rc;
}
