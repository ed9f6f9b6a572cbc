/*
 * fakeprocs: what each process holds on each fake card, published by the
 * fake libcuda and read by the fake NVML, as the real driver lets NVML list
 * every process on a card with its usage.
 *
 * With $GPUSLICE_FAKE_PROCS naming a folder, the fake libcuda keeps one file
 * there per process and rewrites it at every change of its usage; the fake
 * NVML lists the files of live processes. Unset: nothing is published, and
 * the fake NVML lists no processes.
 *
 * Pids: drivers before 580 report the host's pid, which a process in a pid
 * namespace cannot see. The fake models that with a pid no caller has: its
 * own pid plus 1000000 times (1 + its pid namespace's inode mod 2000). The
 * shim must find it as it finds the real one. With $GPUSLICE_FAKE_PIDS set
 * to "caller" it reports getpid(), as driver 580 gives pids in the caller's
 * namespace.
 *
 * Liveness: the writer holds an exclusive flock on its file for its life;
 * a file whose lock can be taken belongs to a dead process and is removed.
 */
#ifndef GPUSLICE_FAKEPROCS_H
#define GPUSLICE_FAKEPROCS_H

#include <stdint.h>

#define FAKEPROCS_ENV "GPUSLICE_FAKE_PROCS"
#define FAKEPROCS_MAX 256
#define FAKEPROCS_PIDS_ENV "GPUSLICE_FAKE_PIDS"

/* The pid the fake driver reports for the calling process. */
unsigned fakeprocs_driver_pid(void);

/* Publish this process's usage: bytes[i] on the card whose UUID is uuids[i]. */
void fakeprocs_publish(const char *const *uuids, const uint64_t *bytes, unsigned n);

/* After fork, in the child: the parent's file is the parent's. */
void fakeprocs_forget(void);

struct fakeproc {
    unsigned pid;
    uint64_t bytes;
};

/* The live processes holding memory on the card `uuid`: their count (at
 * most max), or -1 if the folder cannot be read. */
int fakeprocs_list(const char *uuid, struct fakeproc *out, unsigned max);

#endif
