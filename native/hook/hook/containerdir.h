/*
 * The host side of a container's state: <state-dir>/containers/<id>/ (the
 * placement file, the shim's region, the cards mount point) and the host's
 * card files in <state-dir>/cards. Made and removed without following a
 * link, never recursively.
 */
#ifndef GS_CONTAINERDIR_H
#define GS_CONTAINERDIR_H

#include <stdint.h>
#include <sys/types.h>

/* "<dir>/<name>" without a doubled slash. */
char *gs_path_join(const char *dir, const char *name);

/* Make <state_dir>/containers/<id>/ (mode 0755, owned by uid:gid when
 * root); *fd: an O_RDONLY fd of it, *path: its path (malloc'ed). fresh: for
 * a container that held nothing before this admission: what an earlier
 * container of the same id left there (its region, its placement) is
 * removed first, and a folder that cannot be removed is an error. Else
 * (another device of the same container) the folder is kept as it is. */
int gs_make_container_dir(const char *state_dir, const char *cid, uid_t uid, gid_t gid,
                          int fresh, int *fd, char **path);

/* The card a card-less device was placed on: "<index> <uuid>\n" in the
 * container dir's `card` file (other lines kept), replaced atomically. */
int gs_write_placement(int dirfd, const char *path, int64_t index, const char *uuid);

/* <state_dir>/cards, made if missing, mode 01777 (every tenant writes its
 * card's file there; sticky: none removes another's). *fd: O_RDONLY. */
int gs_open_card_dir(const char *state_dir, int *fd, char **path);

/* Remove what the hook and the shim put in the container dir, then the
 * dir. Never recursive: where `cards` is still bound, a recursive removal
 * would reach the host's card files. Errors are ignored: what is left
 * behind is an empty folder or a file, and a release must not fail on it. */
void gs_remove_container_dir(const char *state_dir, const char *cid);

#endif
