/*
 * The command line: verbs, options and the rule each value must meet.
 * Every argument is checked before anything is read or opened; a problem
 * is one line naming the option, the value and the rule.
 */
#ifndef GS_ARGS_H
#define GS_ARGS_H

#include <stddef.h>
#include <stdint.h>

enum verb { V_CREATE = 1, V_RELEASE = 2, V_GC = 4, V_ADMIT = 8, V_RESIZE = 16, V_ROOM = 32 };

enum opt {
    O_DEVICE, O_DATABASE, O_STATE_DIR, O_CARD, O_EXCLUSIVE, O_MEMORY, O_CORES, O_PRELOAD,
    O_PRIORITY, O_ID, O_PID, O_PID_START, O_RUNTIME, O_SLICES, O_PROFILE, O_NAME, O_MPS, O_COUNT
};

#define REQUEST_VERBS (V_CREATE | V_ADMIT)

struct gs_args {
    enum verb verb;
    const char *verb_name;
    const char *value[O_COUNT]; /* as given, NULL if not; "" for a flag */
    const char **cards; /* every --card, in order */
    size_t n_cards;
    int64_t memory_mib, cores, pid, pid_start;
    int64_t slices; /* --slices N: a gang of N slices, one per card; 0 if not given */
    int preload_file; /* --preload ld.so.preload */
    const char *priority; /* --priority: a GPUSLICE_PRIORITY_*_WORD (gpuslice/limits.h) */
    /* room: every --profile MIB:CORES, in order (malloc'ed, free them) */
    int64_t *profile_mib, *profile_cores;
    size_t n_profiles;
};

/* GS_OK, or GS_ERROR with the message. a->cards and the profiles are
 * malloc'ed (gs_args_free). */
int gs_parse_args(int argc, char **argv, struct gs_args *a);
void gs_args_free(struct gs_args *a);

/* The --help text, on stdout. */
void gs_print_help(void);

#endif
