/*
 * Reading and checking the OCI state and config.json (see oci.h). Files
 * are opened fd by fd without following a link, read with a bound, and
 * parsed by the validating parser in json.c.
 */
#include "oci.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "claim.h"
#include "json.h"
#include "text.h"
#include "util.h"

#define ID_RULE "is not 1-128 letters, digits, '_', '.', '-' starting with a letter or digit"
#define RUNTIME_FIX "is this run by an OCI runtime?"

static int id_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (!first && (c == '_' || c == '.' || c == '-'));
}

int gs_container_id_ok(const char *id, size_t len)
{
    if (len < 1 || len > 128)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!id_char(id[i], i == 0))
            return 0;
    return memmem(id, len, "..", 2) == NULL;
}

int gs_container_id_error(const char *id, size_t len)
{
    char *shown = gs_quoted(id, len, GS_AS_STRING);
    int rc = gs_fail("container id %s " ID_RULE, shown);
    free(shown);
    return rc;
}

/* "<name> <v's JSON text> <rule>" as the message; GS_ERROR. */
static int fail_value(const char *name, const struct gs_json *v, const char *rule)
{
    char *shown = gs_quoted(v->p, v->len, GS_AS_JSON);
    int rc = gs_fail("%s %s %s", name, shown, rule);
    free(shown);
    return rc;
}

int gs_parse_state(const char *data, size_t n, struct gs_state *out)
{
    memset(out, 0, sizeof *out);
    int rc = GS_ERROR;
    struct gs_str err = {0};
    struct gs_json doc, v;
    if (gs_json_parse(data, n, &doc, &err) < 0) {
        gs_fail("the OCI state on stdin is not JSON: %s; " RUNTIME_FIX, err.s);
        goto out;
    }
    if (doc.type != GS_JSON_OBJECT) {
        char *shown = gs_quoted(doc.p, doc.len, GS_AS_JSON);
        gs_fail("the OCI state on stdin is not a JSON object: %s; " RUNTIME_FIX, shown);
        free(shown);
        goto out;
    }
    size_t len = 0;
    if (!gs_json_member(&doc, "id", &v)) {
        gs_fail("the OCI state on stdin has no \"id\" (the container's); " RUNTIME_FIX);
        goto out;
    }
    char *id = gs_json_string(&v, &len);
    if (!id || !gs_container_id_ok(id, len)) {
        free(id);
        fail_value("container id", &v, "in the OCI state " ID_RULE);
        goto out;
    }
    /* Ids gpuslice keeps for holders without a container (claim.h): the
     * plugin's reservations and Slurm's jobs. A container whose starter
     * picked such an id (runc, ctr) would pass for one. */
    static const char *const kept[][2] = {
        {GPUSLICE_CLAIM_ID_PREFIX, "gpuslice-nomad-device's reservations"},
        {GPUSLICE_SLURM_ID_PREFIX, "Slurm jobs' slices"},
    };
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        size_t n = strlen(kept[i][0]);
        if (len >= n && memcmp(id, kept[i][0], n) == 0) {
            free(id);
            struct gs_str rule = {0};
            gs_str_addf(&rule, "in the OCI state starts with \"%s\", which gpuslice keeps for "
                        "%s; start the container under another id", kept[i][0], kept[i][1]);
            fail_value("container id", &v, gs_str_cstr(&rule));
            gs_str_free(&rule);
            goto out;
        }
    }
    out->id = id;
    if (gs_json_member(&doc, "pid", &v) && v.type != GS_JSON_NULL) {
        /* An int above int64 is refused too: it could name no process. */
        if (gs_json_int64(&v, &out->pid) != 1 || out->pid <= 0) {
            fail_value("pid", &v, "in the OCI state is not a positive integer");
            goto out;
        }
        out->has_pid = 1;
    }
    if (!gs_json_member(&doc, "bundle", &v)) {
        gs_fail("the OCI state on stdin has no \"bundle\" (the container's folder); "
                RUNTIME_FIX);
        goto out;
    }
    char *bundle = gs_json_string(&v, &len);
    if (!bundle || bundle[0] != '/' || strlen(bundle) != len) {
        free(bundle);
        fail_value("bundle", &v, "in the OCI state is not an absolute path");
        goto out;
    }
    out->bundle = bundle;
    rc = GS_OK;
out:
    gs_str_free(&err);
    if (rc != GS_OK)
        gs_state_free(out);
    return rc;
}

int gs_read_state(int fd, struct gs_state *out)
{
    memset(out, 0, sizeof *out);
    char *data;
    size_t n;
    if (gs_read_bounded(fd, GS_STATE_MAX_BYTES, &data, &n) < 0)
        return gs_fail_errno("the OCI state on stdin", errno);
    int rc = n > GS_STATE_MAX_BYTES
                 ? gs_fail("the OCI state on stdin is over %d bytes; " RUNTIME_FIX,
                           GS_STATE_MAX_BYTES)
                 : gs_parse_state(data, n, out);
    free(data);
    return rc;
}

void gs_state_free(struct gs_state *s)
{
    free(s->id);
    free(s->bundle);
    memset(s, 0, sizeof *s);
}

/* A member that must be an object when present: 1 and *out when it is
 * one, 0 when absent or null, -1 otherwise. */
static int object_member(const struct gs_json *obj, const char *key, struct gs_json *out)
{
    if (!gs_json_member(obj, key, out) || out->type == GS_JSON_NULL)
        return 0;
    return out->type == GS_JSON_OBJECT ? 1 : -1;
}

/* process.user.<what>: absent is 0 (root), as runc has it. */
static int user_id(const struct gs_json *user, int has_user, const char *what, uint32_t *out)
{
    struct gs_json v;
    *out = 0;
    if (!has_user || !gs_json_member(user, what, &v))
        return GS_OK;
    int64_t x;
    if (gs_json_int64(&v, &x) != 1 || x < 0 || x >= 4294967295LL) {
        char name[32];
        snprintf(name, sizeof name, "process.user.%s", what);
        return fail_value(name, &v, "in config.json is not an id (a whole number from 0 to "
                                    "4294967294)");
    }
    *out = (uint32_t)x;
    return GS_OK;
}

/* The container's name from config.json's annotations: the first of
 * GS_NAME_ANNOTATIONS that is a string, cut at a NUL and to
 * GS_NAME_MAX_CHARS characters, made fit for a terminal and a label by
 * gpuslice/text.h's rule (one line, no controls, no bidi overrides) as it
 * enters: every reader (status, top, the exporter) gets it clean.
 * Anything else is no name: a name is for operators, never a reason to
 * refuse a start. */
static char *name_of(const struct gs_json *doc)
{
    static const char *const keys[] = GS_NAME_ANNOTATIONS;
    struct gs_json ann, v;
    if (object_member(doc, "annotations", &ann) != 1)
        return gs_xstrdup("");
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (!gs_json_member(&ann, keys[k], &v) || v.type != GS_JSON_STRING)
            continue;
        size_t len;
        char *s = gs_json_string(&v, &len);
        if (!s)
            continue;
        char *name = gs_text_clean(s, strnlen(s, len), GS_NAME_MAX_CHARS);
        free(s);
        return name;
    }
    return gs_xstrdup("");
}

int gs_parse_bundle(const char *bundle, const char *data, size_t n, struct gs_bundle *out)
{
    memset(out, 0, sizeof *out);
    struct gs_str err = {0}, why = {0};
    struct gs_json doc, process, user, root, path;
    char *where = gs_quoted(bundle, strlen(bundle), GS_AS_PATH), *shown = NULL;
    int rc = GS_ERROR;
    if (gs_json_parse(data, n, &doc, &err) < 0) {
        gs_fail("%s/config.json is not JSON: %s", where, err.s);
        goto out;
    }
    if (doc.type != GS_JSON_OBJECT) {
        shown = gs_quoted(doc.p, doc.len, GS_AS_JSON);
        gs_fail("%s/config.json is not a JSON object: %s", where, shown);
        goto out;
    }
    int has_process = object_member(&doc, "process", &process);
    if (has_process < 0) {
        fail_value("process", &process, "in config.json is not a JSON object");
        goto out;
    }
    int has_user = has_process ? object_member(&process, "user", &user) : 0;
    if (has_user < 0) {
        fail_value("process.user", &user, "in config.json is not a JSON object");
        goto out;
    }
    if (user_id(&user, has_user, "uid", &out->uid) != GS_OK ||
        user_id(&user, has_user, "gid", &out->gid) != GS_OK ||
        gs_claim_from_env(has_process ? &process : NULL, &out->claim) != GS_OK)
        goto out;
    /* root.path is checked now but reported after admission: a container
     * that does not fit hears that first. */
    int has_root = object_member(&doc, "root", &root);
    size_t len = 0;
    if (has_root < 0) {
        shown = gs_quoted(root.p, root.len, GS_AS_JSON);
        gs_str_addf(&why, "root %s in %s/config.json is not a JSON object", shown, where);
    } else if (!has_root || !gs_json_member(&root, "path", &path)) {
        gs_str_addf(&why, "%s/config.json has no root.path (the container's root file "
                    "system)", where);
    } else {
        char *p = gs_json_string(&path, &len);
        if (p && len > 0 && strlen(p) == len) {
            out->root = p;
        } else {
            free(p);
            shown = gs_quoted(path.p, path.len, GS_AS_JSON);
            gs_str_addf(&why, "root.path %s in %s/config.json is not a path", shown, where);
        }
    }
    if (why.len)
        out->root_error = gs_str_take(&why);
    out->name = name_of(&doc);
    rc = GS_OK;
out:
    gs_str_free(&err);
    free(shown);
    free(where);
    if (rc != GS_OK)
        gs_bundle_free(out);
    return rc;
}

int gs_read_bundle(const char *bundle, struct gs_bundle *out)
{
    memset(out, 0, sizeof *out);
    char *where = gs_quoted(bundle, strlen(bundle), GS_AS_PATH), *data = NULL;
    size_t n;
    struct stat st;
    int rc = GS_ERROR, dirfd, fd, e;
    if (lstat(bundle, &st) != 0) {
        gs_fail("bundle %s: %s", where, strerror(errno));
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        gs_fail("bundle %s is not a folder", where);
        goto out;
    }
    dirfd = open(bundle, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) {
        gs_fail("bundle %s: %s", where, strerror(errno));
        goto out;
    }
    /* O_NONBLOCK: a FIFO named config.json must not hang the hook. */
    fd = openat(dirfd, "config.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    e = errno;
    close(dirfd);
    if (fd < 0) {
        gs_fail("%s/config.json: %s (a link is refused)", where, strerror(e));
        goto out;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        gs_fail("%s/config.json is not a regular file", where);
        goto out;
    }
    int r = gs_read_bounded(fd, GS_CONFIG_MAX_BYTES, &data, &n);
    e = errno;
    close(fd);
    if (r < 0)
        gs_fail("%s/config.json: %s", where, strerror(e));
    else if (n > GS_CONFIG_MAX_BYTES)
        gs_fail("%s/config.json is over %d MiB", where, GS_CONFIG_MAX_BYTES / (1024 * 1024));
    else
        rc = gs_parse_bundle(bundle, data, n, out);
out:
    free(data);
    free(where);
    return rc;
}

void gs_bundle_free(struct gs_bundle *c)
{
    free(c->root);
    free(c->root_error);
    free(c->name);
    free(c->claim);
    memset(c, 0, sizeof *c);
}

int gs_rootfs_of(const char *bundle, const struct gs_bundle *cfg, char **out)
{
    if (!cfg->root)
        return gs_fail("%s", cfg->root_error ? cfg->root_error : "config.json has no root.path");
    if (cfg->root[0] == '/') {
        *out = gs_xstrdup(cfg->root);
        return GS_OK;
    }
    struct gs_str p = {0}; /* bundle/root, one slash between */
    gs_str_add(&p, bundle);
    if (p.len && p.s[p.len - 1] != '/')
        gs_str_addc(&p, '/');
    gs_str_add(&p, cfg->root);
    *out = gs_str_take(&p);
    return GS_OK;
}
