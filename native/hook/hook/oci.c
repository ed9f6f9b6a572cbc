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

#include "json.h"
#include "pyfmt.h"
#include "util.h"

#define ID_RULE "is not 1-128 letters, digits, '_', '.', '-' starting with a letter or digit"

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
    struct gs_str r = {0};
    gs_py_repr_bytes(&r, id, len);
    int rc = gs_fail("container id %s " ID_RULE, r.s);
    gs_str_free(&r);
    return rc;
}

/* "<what> <repr(v)> <rest>" as the message; GS_ERROR. */
static int fail_repr(const char *what, const struct gs_json *v, const char *rest)
{
    struct gs_str r = {0};
    if (v)
        gs_py_repr(&r, v);
    else
        gs_str_add(&r, "None");
    int rc = gs_fail("%s %s %s", what, r.s, rest);
    gs_str_free(&r);
    return rc;
}

int gs_read_state(int fd, struct gs_state *out)
{
    memset(out, 0, sizeof *out);
    char *data;
    size_t n;
    if (gs_read_bounded(fd, GS_STATE_MAX_BYTES, &data, &n) < 0)
        return gs_fail_errno("the OCI state on stdin", errno);
    int rc = GS_ERROR;
    struct gs_str err = {0};
    struct gs_json doc, v;
    if (n > GS_STATE_MAX_BYTES) {
        gs_fail("the OCI state on stdin is over %d bytes", GS_STATE_MAX_BYTES);
        goto out;
    }
    if (gs_json_parse(data, n, &doc, &err) < 0) {
        gs_fail("the OCI state on stdin is not JSON (%s); is this run by an OCI runtime?",
                err.s);
        goto out;
    }
    if (doc.type != GS_JSON_OBJECT) {
        gs_fail("the OCI state on stdin is not a JSON object");
        goto out;
    }
    int has = gs_json_member(&doc, "id", &v);
    size_t len = 0;
    char *id = has && v.type == GS_JSON_STRING ? gs_json_string(&v, &len) : NULL;
    if (!id || !gs_container_id_ok(id, len)) {
        free(id);
        fail_repr("container id", has ? &v : NULL, ID_RULE);
        goto out;
    }
    out->id = id;
    if (gs_json_member(&doc, "pid", &v) && v.type != GS_JSON_NULL) {
        /* An int above int64 is refused too: it could name no process. */
        if (gs_json_int64(&v, &out->pid) != 1 || out->pid <= 0) {
            fail_repr("pid", &v, "in the OCI state is not a positive integer");
            goto out;
        }
        out->has_pid = 1;
    }
    has = gs_json_member(&doc, "bundle", &v);
    char *bundle = has && v.type == GS_JSON_STRING ? gs_json_string(&v, &len) : NULL;
    if (!bundle || bundle[0] != '/' || strlen(bundle) != len) {
        free(bundle);
        fail_repr("bundle", has ? &v : NULL, "in the OCI state is not an absolute path");
        goto out;
    }
    out->bundle = bundle;
    rc = GS_OK;
out:
    gs_str_free(&err);
    free(data);
    if (rc != GS_OK)
        gs_state_free(out);
    return rc;
}

void gs_state_free(struct gs_state *s)
{
    free(s->id);
    free(s->bundle);
    memset(s, 0, sizeof *s);
}

/* Python's (obj.get(key) or {}): *out is the member when it is a non-empty
 * value; 0 when absent or false (an empty object then); -1 when it is a
 * true value that is not an object (Python would have crashed). */
static int object_or_empty(const struct gs_json *obj, const char *key, struct gs_json *out)
{
    if (obj->type != GS_JSON_OBJECT || !gs_json_member(obj, key, out) || !gs_json_truthy(out))
        return 0;
    return out->type == GS_JSON_OBJECT ? 1 : -1;
}

static int user_id(const struct gs_json *user, int has_user, const char *what, uint32_t *out)
{
    struct gs_json v;
    if (!has_user || !gs_json_member(user, what, &v)) {
        *out = 0; /* user.get("uid", 0) */
        return GS_OK;
    }
    int64_t x;
    if (gs_json_int64(&v, &x) != 1 || x < 0 || x >= 4294967295LL) {
        char name[32];
        snprintf(name, sizeof name, "process.user.%s", what);
        return fail_repr(name, &v, "in config.json is not a valid id");
    }
    *out = (uint32_t)x;
    return GS_OK;
}

static int parse_config(const char *bundle, const char *data, size_t n, struct gs_config *out)
{
    struct gs_str err = {0};
    struct gs_json doc, process, user, root, path;
    if (gs_json_parse(data, n, &doc, &err) < 0) {
        gs_fail("%s/config.json is not JSON: %s", bundle, err.s);
        gs_str_free(&err);
        return GS_ERROR;
    }
    if (doc.type != GS_JSON_OBJECT)
        return gs_fail("%s/config.json is not a JSON object", bundle);
    int has_process = object_or_empty(&doc, "process", &process);
    if (has_process < 0)
        return fail_repr("process", &process, "in config.json is not a JSON object");
    int has_user = has_process ? object_or_empty(&process, "user", &user) : 0;
    if (has_user < 0)
        return fail_repr("process.user", &user, "in config.json is not a JSON object");
    if (user_id(&user, has_user, "uid", &out->uid) != GS_OK ||
        user_id(&user, has_user, "gid", &out->gid) != GS_OK)
        return GS_ERROR;
    /* root.path is checked now but reported after admission: a container
     * that does not fit hears that first. */
    int has_root = object_or_empty(&doc, "root", &root);
    struct gs_str why = {0};
    size_t len = 0;
    if (has_root < 0) {
        gs_str_add(&why, "root ");
        gs_py_repr(&why, &root);
        gs_str_addf(&why, " in %s/config.json is not a JSON object", bundle);
    } else {
        int has_path = has_root && gs_json_member(&root, "path", &path);
        char *p = has_path && path.type == GS_JSON_STRING ? gs_json_string(&path, &len) : NULL;
        if (p && len > 0 && strlen(p) == len) {
            out->root = p;
        } else {
            free(p);
            gs_str_add(&why, "root.path ");
            if (has_path)
                gs_py_repr(&why, &path);
            else
                gs_str_add(&why, "None");
            gs_str_addf(&why, " in %s/config.json is not a path", bundle);
        }
    }
    if (why.len)
        out->root_error = gs_str_take(&why);
    return GS_OK;
}

int gs_read_config(const char *bundle, struct gs_config *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (lstat(bundle, &st) != 0)
        return gs_fail("bundle %s: %s", bundle, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return gs_fail("bundle %s is not a folder", bundle);
    int dirfd = open(bundle, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return gs_fail("bundle %s: %s", bundle, strerror(errno));
    /* O_NONBLOCK: a FIFO named config.json must not hang the hook. */
    int fd = openat(dirfd, "config.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    int e = errno;
    close(dirfd);
    if (fd < 0)
        return gs_fail("%s/config.json: %s (a link is refused)", bundle, strerror(e));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return gs_fail("%s/config.json is not a regular file", bundle);
    }
    char *data;
    size_t n;
    int r = gs_read_bounded(fd, GS_CONFIG_MAX_BYTES, &data, &n);
    e = errno;
    close(fd);
    if (r < 0)
        return gs_fail("%s/config.json: %s", bundle, strerror(e));
    int rc;
    if (n > GS_CONFIG_MAX_BYTES)
        rc = gs_fail("%s/config.json is over %d MiB", bundle, GS_CONFIG_MAX_BYTES / (1024 * 1024));
    else
        rc = parse_config(bundle, data, n, out);
    free(data);
    if (rc != GS_OK)
        gs_config_free(out);
    return rc;
}

void gs_config_free(struct gs_config *c)
{
    free(c->root);
    free(c->root_error);
    memset(c, 0, sizeof *c);
}

int gs_rootfs_of(const char *bundle, const struct gs_config *cfg, char **out)
{
    if (!cfg->root)
        return gs_fail("%s", cfg->root_error ? cfg->root_error : "root.path is not a path");
    if (cfg->root[0] == '/') {
        *out = gs_xstrdup(cfg->root);
        return GS_OK;
    }
    struct gs_str p = {0}; /* os.path.join(bundle, root) */
    gs_str_add(&p, bundle);
    if (p.len && p.s[p.len - 1] != '/')
        gs_str_addc(&p, '/');
    gs_str_add(&p, cfg->root);
    *out = gs_str_take(&p);
    return GS_OK;
}
