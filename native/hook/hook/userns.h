/*
 * Whether the hook runs in the host's own user namespace. In any other
 * (a rootless runtime's, or a container's own with --userns) the node's
 * accountant and state dirs belong to a root the hook is not, and no card
 * or slice is granted.
 */
#ifndef GS_USERNS_H
#define GS_USERNS_H

/* 1 in the initial user namespace, 0 in another; -1 (message set) when
 * /proc/self/uid_map cannot be read. *host_uid: the host's uid of our
 * euid, -1 when the host maps none (set when 0 is returned). */
int gs_in_initial_userns(long long *host_uid);

/* GS_OK in the initial user namespace; else GS_ERROR and the one line
 * "<who>: the hook runs in a user namespace (uid 0 there is uid 1000 of the
 * host), ...: why nothing is granted; <fix>". */
int gs_require_initial_userns(const char *who, const char *fix);

#endif
