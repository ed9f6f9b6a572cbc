/*
 * The CDI cache (cache.h): read and checked against what it was made from.
 * A cache that is current costs one stat(2) per input (the configuration,
 * the spec dirs, their spec files) and a parse of some 50 KiB of JSON.
 */
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpuslice/cdicache.h"
#include "util.h"

const char *gs_rt_cache_path(void)
{
    const char *env = getenv(GPUSLICE_CDI_CACHE_ENV);
    return env && *env ? env : GPUSLICE_CDI_CACHE_DEFAULT;
}

static long long ns(const struct timespec *t)
{
    return (long long)t->tv_sec * 1000000000LL + t->tv_nsec;
}

/* Is [path, dev, ino, size, mtime_ns, ctime_ns] (or [path, null]) what the
 * path is now? */
static int input_current(const json_t *in)
{
    const char *path = json_string_value(json_array_get(in, 0));
    if (!path)
        return 0;
    struct stat st;
    int there = stat(path, &st) == 0;
    if (json_array_size(in) == 2 && json_is_null(json_array_get(in, 1)))
        return !there;
    if (!there || json_array_size(in) != 6)
        return 0;
    long long want[5], have[5] = {(long long)st.st_dev, (long long)st.st_ino,
                                  (long long)st.st_size, ns(&st.st_mtim), ns(&st.st_ctim)};
    for (size_t i = 0; i < 5; i++) {
        const json_t *v = json_array_get(in, i + 1);
        if (!json_is_integer(v))
            return 0;
        want[i] = json_integer_value(v);
    }
    return memcmp(want, have, sizeof want) == 0;
}

static int env_current(const json_t *env)
{
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)env, name, v) {
        const char *now = getenv(name);
        if (json_is_null(v) ? now != NULL : !now || !json_is_string(v) ||
                                                strcmp(now, json_string_value(v)) != 0)
            return 0;
    }
    return json_is_object(env);
}

static int stale(const char *path, const char *why)
{
    struct gs_str b = {0};
    gs_str_addf(&b, "the CDI cache %s %s", path, why);
    int rc = gs_refuse("%s", b.s);
    gs_str_free(&b);
    return rc;
}

int gs_rt_cache_load(const char *path, int current, json_t **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return stale(path, errno == ENOENT ? "is missing" : "cannot be opened");
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    /* Only what we ourselves (root, for a daemon's runtime) wrote is trusted:
     * the cache says which hooks and mounts a container gets. */
    int ours = ok && st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH));
    ok = ours && gs_read_bounded(fd, GPUSLICE_CDI_CACHE_MAX_BYTES, &text, &len) == 0 &&
         len <= GPUSLICE_CDI_CACHE_MAX_BYTES;
    close(fd);
    if (!ok) {
        free(text);
        return stale(path, ours ? "cannot be read" : "is not a regular file that only we may write");
    }
    json_error_t je;
    json_t *doc = json_loadb(text, len, 0, &je);
    free(text);
    if (!doc)
        return stale(path, "is not JSON");
    const char *why = NULL;
    if (json_integer_value(json_object_get(doc, "version")) != GPUSLICE_CDI_CACHE_VERSION ||
        !json_is_string(json_object_get(doc, "kind")))
        why = "is of another version";
    else if (current && !json_is_true(json_object_get(doc, "trusted")))
        why = "was made while its inputs were changing";
    else if (current && !env_current(json_object_get(doc, "env")))
        why = "was made with another environment";
    if (!why && current) {
        size_t i;
        const json_t *in;
        json_array_foreach(json_object_get(doc, "inputs"), i, in)
            if (!input_current(in)) {
                why = "is older than a configuration or spec it was made from";
                break;
            }
        if (!json_is_array(json_object_get(doc, "inputs")))
            why = "lists no inputs";
    }
    if (why) {
        json_decref(doc);
        return stale(path, why);
    }
    *out = doc;
    return GS_OK;
}
