/*
 * The two inputs an OCI runtime gives the hook, both written by whoever
 * built the container: the state on stdin and the bundle's config.json.
 * Everything is checked: the id, the pid, the paths, the sizes, the JSON,
 * the user. A message names a bad value by its JSON text, and the bundle's
 * path as it is, each on one line (gs_quote).
 */
#ifndef GS_OCI_H
#define GS_OCI_H

#include <stddef.h>
#include <stdint.h>

#define GS_STATE_MAX_BYTES (64 * 1024)          /* an OCI state is a few hundred bytes */
#define GS_CONFIG_MAX_BYTES (16 * 1024 * 1024)  /* config.json; real ones are tens of KiB */

struct gs_state {
    char *id;
    int has_pid;
    int64_t pid;
    char *bundle;
};

/* What the hook reads of a bundle's config.json. */
struct gs_bundle {
    uint32_t uid, gid;  /* process.user: the container dir's owner */
    char *root;         /* root.path as written, or NULL and: */
    char *root_error;   /* why it is not a path (reported after admission: a
                           container that does not fit hears that first) */
    char *name;         /* the engine's name for the container (GS_NAME_ANNOTATIONS),
                           one line of at most GS_NAME_MAX_CHARS; "" if none */
    char *claim;        /* process.env's GPUSLICE_CLAIM token (claim.h), or NULL */
};

/* The annotations an engine names a container by, the first present wins:
 * containerd's CRI, CRI-O, nerdctl. Podman 4.3 (seen) and Docker put none
 * in config.json. */
#define GS_NAME_ANNOTATIONS \
    { "io.kubernetes.cri.container-name", "io.kubernetes.cri-o.ContainerName", "nerdctl/name" }
#define GS_NAME_MAX_CHARS 128

/* 1-128 of [A-Za-z0-9_.-], the first a letter or digit, no "..": it names
 * a folder and a database row. */
int gs_container_id_ok(const char *id, size_t len);
/* GS_ERROR with 'container id "..." is not ...' for id (any bytes, from
 * the command line: named as a string). */
int gs_container_id_error(const char *id, size_t len);

int gs_read_state(int fd, struct gs_state *out);
/* The same on the state's text (what gs_read_state read): for the fuzzer. */
int gs_parse_state(const char *data, size_t n, struct gs_state *out);
void gs_state_free(struct gs_state *s);

int gs_read_bundle(const char *bundle, struct gs_bundle *out);
/* The same on config.json's text, bundle naming it in messages. */
int gs_parse_bundle(const char *bundle, const char *data, size_t n, struct gs_bundle *out);
void gs_bundle_free(struct gs_bundle *c);

/* The rootfs path: root.path, under the bundle when relative. */
int gs_rootfs_of(const char *bundle, const struct gs_bundle *cfg, char **out);

#endif
