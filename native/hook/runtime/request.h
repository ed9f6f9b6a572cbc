/*
 * Does a bundle's config.json ask for gpuslice? gpuslice-runtime asks this
 * before every create and run, of a file whoever built the container wrote.
 * The rules are in native/hook/README.md ("Request rules"): GPUSLICE=<value>
 * in process.env, or an annotation gpuslice.io/request or cdi.k8s.io/...
 * Anything wrong with the file is "no": the real runtime reports it.
 */
#ifndef GS_RUNTIME_REQUEST_H
#define GS_RUNTIME_REQUEST_H

#include <stddef.h>

/* At most this much of config.json is read: a real one is a few KB. */
#define GS_RT_CONFIG_MAX ((size_t)64 << 20)

/* 1 if text (config.json's bytes, no NUL needed) parses and asks. */
int gs_rt_text_asks(const char *text, size_t len);

/* config.json's bytes (malloc'ed, *text) and permission bits: 0 if path is
 * a regular file of at most GS_RT_CONFIG_MAX bytes (follow: through a
 * symbolic link); -1 otherwise (errno ELOOP: a link, not followed). */
int gs_rt_read_config(const char *path, int follow, char **text, size_t *len, unsigned *mode);

/* 1 if the config.json at path, read through a symbolic link, asks: for
 * naming a link that asks, which the wrapper does not follow. */
int gs_rt_link_asks(const char *path);

#endif
