/*
 * The request in a bundle's config.json (see request.h). It runs on
 * every create: config.json is walked once at the top, nothing is decoded
 * whole, and what is not the shape runc accepts is left to runc.
 */
#include "request.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "util.h"

/* Does the JSON string v, decoded, start with prefix? *whole: its decoded
 * length. Nothing allocated: only the first bytes are kept. */
static int string_starts(const struct gs_json *v, const char *prefix, size_t *whole)
{
    char head[32];
    size_t n = strlen(prefix);
    if (v->type != GS_JSON_STRING || n > sizeof head)
        return 0;
    *whole = gs_json_string_into(v, head, sizeof head);
    return *whole >= n && memcmp(head, prefix, n) == 0;
}

static int string_is(const struct gs_json *v, const char *want)
{
    size_t len;
    return string_starts(v, want, &len) && len == strlen(want);
}

/*
 * A request: process.env has GPUSLICE=<something>, or an annotation
 * gpuslice.io/request, or any cdi.k8s.io/ annotation (CDI devices asked the
 * way Kubernetes asks them, which apply.c honours for any vendor). A
 * repeated member counts as its last one, as for runc's Go decoder.
 */
static int asks_for_gpuslice(const struct gs_json *root)
{
    static const char env_name[] = "GPUSLICE=", cdi[] = "cdi.k8s.io/";
    struct gs_json k, v, process = {0}, anns = {0}, env;
    size_t cursor = 0, len;
    /* A config.json that is an array (or a string...) is runc's to refuse;
     * its elements have no names to look at. */
    if (root->type != GS_JSON_OBJECT)
        return 0;
    while (gs_json_next(root, &cursor, &k, &v)) {
        if (string_is(&k, "process"))
            process = v;
        else if (string_is(&k, "annotations"))
            anns = v;
    }
    cursor = 0;
    if (gs_json_member(&process, "env", &env) && env.type == GS_JSON_ARRAY)
        while (gs_json_next(&env, &cursor, NULL, &v))
            if (string_starts(&v, env_name, &len) && len > sizeof env_name - 1)
                return 1;
    cursor = 0;
    if (anns.type == GS_JSON_OBJECT)
        while (gs_json_next(&anns, &cursor, &k, &v))
            if (string_is(&k, "gpuslice.io/request") || string_starts(&k, cdi, &len))
                return 1;
    return 0;
}

int gs_rt_text_asks(const char *text, size_t len)
{
    struct gs_json root;
    struct gs_str err = {0};
    int asks = gs_json_parse(text, len, &root, &err) == 0 && asks_for_gpuslice(&root);
    gs_str_free(&err);
    return asks;
}

int gs_rt_read_config(const char *path, int follow, char **text, size_t *len, unsigned *mode)
{
    /* O_NONBLOCK: a FIFO planted there must not hang the wrapper. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0)
        return -1;
    struct stat st;
    *text = NULL;
    *len = 0;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
             gs_read_bounded(fd, GS_RT_CONFIG_MAX, text, len) == 0 && *len <= GS_RT_CONFIG_MAX;
    close(fd);
    if (!ok) {
        free(*text);
        *text = NULL;
        return -1;
    }
    *mode = st.st_mode & 07777;
    return 0;
}

int gs_rt_link_asks(const char *path)
{
    char *text;
    size_t len;
    unsigned mode;
    int asks = gs_rt_read_config(path, 1, &text, &len, &mode) == 0 && gs_rt_text_asks(text, len);
    free(text);
    return asks;
}
