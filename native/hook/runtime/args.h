/*
 * gpuslice-runtime's reading of an OCI runtime command line, as runc's CLI
 * library (urfave/cli v1 over Go's flag package) reads it: global flags,
 * then the command, then the command's flags and arguments. Only what the
 * wrapper must know is kept: its own two options (taken out of argv), the
 * command, --log/--log-format, and for create/run the bundle.
 *
 * Nothing here allocates, reads a file or makes a system call: it runs on
 * every container operation.
 */
#ifndef GS_RUNTIME_ARGS_H
#define GS_RUNTIME_ARGS_H

struct gs_rt_globals {
    const char *runtime;    /* --gpuslice-runtime, or NULL */
    const char *cache_tool; /* --gpuslice-cache-tool, or NULL */
    const char *bad_option; /* one of ours without a value: its name; else NULL */
    int command;            /* argv index of the command (after the removal); 0: none */
    const char *log;        /* --log FILE, the last one; NULL if none */
    const char *log_format; /* --log-format, the last one; NULL if none */
    int help;               /* --help/-h: runc prints its help and runs no command */
    int version;            /* --version/-v: runc prints its version, runs no command */
};

/*
 * Read the global flags of argv and take our own options out of it, in
 * place (argv[*argc] stays NULL). Unknown global flags are kept and taken
 * to be boolean: the real runtime judges them.
 */
void gs_rt_parse_globals(int *argc, char **argv, struct gs_rt_globals *g);

struct gs_rt_create {
    const char *bundle; /* --bundle/-b, the last one; NULL: the current directory */
    int positional;     /* arguments that are not flags: runc wants exactly one, the id */
    int help;           /* --help/-h: runc prints the command's help, creates nothing */
};

/* Read the flags of create/run: argv[first] onwards, up to argc. */
void gs_rt_parse_create(int argc, char **argv, int first, struct gs_rt_create *c);

#endif
