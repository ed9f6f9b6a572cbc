/*
 * What gpuslice-runtime does for a container that asks for CDI devices:
 * find them in the CDI cache (cache.h) and apply their edits to the
 * bundle's config.json, with the rules of the CDI specification and its
 * reference library, as Podman and Docker 25+ apply them themselves:
 *
 * - the request: env GPUSLICE=<device>[,...] and the annotation
 *   gpuslice.io/request (our devices by name, `0-4g-30`, or fully
 *   qualified), then annotations cdi.k8s.io/<any>, by key (fully qualified
 *   devices of any vendor); each device once, in that order;
 * - the edits of each device's spec (once per spec, with its first device)
 *   and of the device, joined in request order, applied in one pass:
 *   env: a variable of the same name is replaced where it stands, others
 *   appended; device nodes: type, major and minor from the host node when
 *   the spec leaves them out (hostPath defaults to path), a node at the
 *   same path replaced, block and character devices allowed in the device
 *   cgroup ("rwm" when no permissions are given), uid and gid the process
 *   user's when the spec gives none and that user is not root; mounts: one
 *   at the same container path replaced, then all sorted by the depth of
 *   their destination and by destination within a depth (the order Podman
 *   gives); hooks appended to their list; additionalGids appended once each
 *   (0 never); intelRdt set; netDevices set by host interface name;
 * - the annotation gpuslice.io/applied records the devices, so that a
 *   retried create changes nothing.
 *
 * Everything that can fail is checked before config is changed.
 */
#ifndef GS_RUNTIME_APPLY_H
#define GS_RUNTIME_APPLY_H

#include <jansson.h>

/* The device nodes' host files are read through this (stat(2) but in tests). */
struct stat;
typedef int (*gs_rt_stat_fn)(const char *path, struct stat *st);

/*
 * Apply what config asks for. GS_OK: config changed, write it; GS_NO: it
 * asks for nothing, or what it asks is in already; GS_ERROR: a request that
 * cannot be served, config unchanged, the line in gs_message().
 */
int gs_rt_apply(json_t *config, const json_t *cache, gs_rt_stat_fn stat_fn);

#endif
