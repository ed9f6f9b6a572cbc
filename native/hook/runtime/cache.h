/*
 * gpuslice-runtime's reading of the CDI cache that gpuslice-cdi-cache
 * writes (its layout and rules: native/include/gpuslice/cdicache.h).
 */
#ifndef GS_RUNTIME_CACHE_H
#define GS_RUNTIME_CACHE_H

#include <jansson.h>

/* The cache file: $GPUSLICE_CDI_CACHE, else the default. */
const char *gs_rt_cache_path(void);

/*
 * The cache at path: GS_OK and *out (the caller's to json_decref) if it is
 * ours (owned by our euid, written by nobody else, a regular file), of
 * this version, and, with current, trusted and made from what the env and
 * the files are now. GS_NO otherwise, with the reason in gs_message(): the
 * cache must be made again first.
 */
int gs_rt_cache_load(const char *path, int current, json_t **out);

#endif
