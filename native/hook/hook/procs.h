/*
 * Processes, from /proc: whether a recorded process is still the same one
 * (pid and start time), and who the container's process is when the hook
 * runs (its pid on the host, the runtime's name).
 */
#ifndef GS_PROCS_H
#define GS_PROCS_H

#include <stdint.h>

/* Field 22 of /proc/<pid>/stat (clock ticks since boot); 1 if found. */
int gs_start_time(int64_t pid, int64_t *out);

/* True while pid runs and started at *started. No pid (or 0): alive, only
 * a release removes such a record. No start time recorded: any process. */
int gs_alive(const int64_t *pid, const int64_t *started);

/* The container's process as the host sees it: the hook's parent when the
 * state gives no pid, or gives the parent's pid in its own namespace (runc
 * runs createContainer hooks from the container's init). *has set to 0
 * when there is none. */
void gs_host_pid(int has_state_pid, int64_t state_pid, int *has, int64_t *out);

/* The runtime's name from the process's comm ("runc:[2:INIT]" -> "runc"),
 * or "" when unknown. out: 33 bytes. */
void gs_runtime_of(int has_pid, int64_t pid, char out[33]);

/* [A-Za-z0-9_.-]{1,32} */
int gs_runtime_name_ok(const char *name);

#endif
