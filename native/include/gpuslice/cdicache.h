/*
 * The runtime's CDI cache: what the spec dirs offer, checked and joined once
 * by gpuslice-cdi-cache (ocihook/cdi_cache.py, which validates every spec as
 * a runtime would), read on each request by gpuslice-runtime
 * (native/hook/runtime/cache.c), which applies the edits itself, in C, so a
 * container that asks for a slice pays no Python start. Plain C: integer
 * #defines and #defines of one string literal (ocihook/cheader.py reads them).
 *
 * The file is JSON, written atomically, mode 0644, by root (the runtime
 * trusts a cache only if its own euid owns it and nobody else may write it):
 *   {"version": GPUSLICE_CDI_CACHE_VERSION,
 *    "trusted": true | false,      false: an input changed too recently to
 *                                  be told apart from a later change by its
 *                                  times (see GPUSLICE_CDI_CACHE_RACY_NS)
 *    "env": {"NAME": "value" | null, ...},      what the tool's result
 *                                  depended on in its environment
 *    "inputs": [[path, dev, ino, size, mtime_ns, ctime_ns] | [path, null]],
 *                                  every file and folder it read (stat,
 *                                  links followed; null: it was missing)
 *    "kind": "gpuslice.io/gpu",     what a plain device name is qualified with
 *    "specs": [containerEdits, ...],  each valid spec's own edits
 *    "devices": {"vendor/class=name": {"spec": i, "edits": containerEdits}},
 *    "conflicts": {"vendor/class=name": [path, ...]},
 *    "offers": {"vendor/class": [name, ...]},   sorted, for messages
 *    "errors": ["why a spec file was skipped", ...]}
 * containerEdits are in the CDI spec's own form (env, deviceNodes, mounts,
 * hooks, additionalGids, intelRdt, netDevices). A cache whose env or inputs
 * differ from now, or that is not trusted, is remade before it is used.
 */
#ifndef GPUSLICE_CDICACHE_H
#define GPUSLICE_CDICACHE_H

#define GPUSLICE_CDI_CACHE_VERSION 1
#define GPUSLICE_CDI_CACHE_DEFAULT "/var/cache/gpuslice/cdi.json"
/* The environment variable that names another cache file (tests, a second
 * configuration on one host). */
#define GPUSLICE_CDI_CACHE_ENV "GPUSLICE_CDI_CACHE"
/* A file's times advance in ticks of the kernel's coarse clock (a few ms):
 * a change within one tick of the last leaves mtime and ctime as they were.
 * An input changed less than this before the cache was made may yet change
 * unseen, so such a cache is marked untrusted and remade next time. */
#define GPUSLICE_CDI_CACHE_RACY_NS 2000000000
/* A cache is some 50 KiB for 8 cards; more than this is not one. */
#define GPUSLICE_CDI_CACHE_MAX_BYTES 67108864

#endif
