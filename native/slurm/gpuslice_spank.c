/*
 * spank_gpuslice.so: the SPANK plugin that puts a Slurm job's shards under gpuslice.
 *
 * Slurm counts a card's shards (gres/shard) but fences nothing. In every job
 * step's slurmstepd (the remote context, as root) this plugin asks
 * `gpuslice slurm admit` for the step's slice: k of the card's N shards
 * become k/N of its memory (and compute, if configured), admitted in the
 * node's accountant like any container's. What the admission prints is the
 * env that preloads the shim with the slice's caps and region, set for the
 * step's tasks. A refusal is one line, printed on each task's stderr (the
 * job's output) before the task is failed: slurmstepd's own log is not the
 * user's to read. The slice is released when the step that admitted it ends
 * (slurm_spank_exit) and, whatever is left, by the job's epilog; when
 * slurmstepd is killed, `gpuslice gc` reclaims it (its pid is gone).
 *
 * The work is in Python (ocihook/slurm): this file only carries Slurm's
 * items to it and its answer back, through public SPANK calls only
 * (spank.h), so that it builds and loads against 22.05 and later.
 *
 * plugstack.conf: required PATH/spank_gpuslice.so [gpuslice=/usr/bin/gpuslice]
 *                 [config=/etc/gpuslice/config.yaml]
 */
#define _GNU_SOURCE /* getpwuid_r, pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(gpuslice, 1);

#define OUT_MAX 8192
/* slurmstepd's step ids for the steps that have no number (slurm.h's
 * SLURM_BATCH_SCRIPT and friends), named as squeue names them. */
#define STEP_EXTERN 0xfffffffcu
#define STEP_BATCH 0xfffffffbu
#define STEP_INTERACTIVE 0xfffffffau

static char gpuslice_bin[PATH_MAX] = "/usr/bin/gpuslice";
static char config_path[PATH_MAX];
static char refusal[1024]; /* the one line a refused step's tasks print */
static int refused;
static int holds; /* this slurmstepd admitted (or shares) the job's slice */
static uint32_t job_id;

static int parse_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        const char *v;
        char *dst;
        if (strncmp(av[i], "gpuslice=", 9) == 0) {
            v = av[i] + 9;
            dst = gpuslice_bin;
        } else if (strncmp(av[i], "config=", 7) == 0) {
            v = av[i] + 7;
            dst = config_path;
        } else {
            slurm_error("gpuslice: plugstack.conf argument '%s' is not gpuslice=PATH or "
                        "config=PATH; fix the spank_gpuslice.so line", av[i]);
            return -1;
        }
        if (v[0] != '/' || strlen(v) >= PATH_MAX) {
            slurm_error("gpuslice: plugstack.conf argument '%s' must name an absolute path "
                        "shorter than %d bytes; fix the spank_gpuslice.so line", av[i], PATH_MAX);
            return -1;
        }
        memcpy(dst, v, strlen(v) + 1);
    }
    return 0;
}

/* Read fd to EOF into buf (NUL-terminated, cut at len - 1). */
static void slurp(int fd, char *buf, size_t len)
{
    size_t used = 0;
    for (;;) {
        char scrap[512];
        char *at = used + 1 < len ? buf + used : scrap;
        size_t room = used + 1 < len ? len - 1 - used : sizeof scrap;
        ssize_t n = read(fd, at, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (at != scrap)
            used += (size_t)n;
    }
    buf[used] = '\0';
}

/* `gpuslice [--config C] slurm ARGS...`: its exit status (-1: not run), its
 * stdout and stderr. A clean env: slurmstepd's is not the helper's business. */
static int run_gpuslice(const char *const *args, char *out, char *err, size_t len)
{
    int po[2], pe[2];
    out[0] = err[0] = '\0';
    if (pipe2(po, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    const char *argv[32];
    size_t n = 0;
    argv[n++] = gpuslice_bin;
    if (config_path[0]) {
        argv[n++] = "--config";
        argv[n++] = config_path;
    }
    argv[n++] = "slurm";
    for (size_t i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", NULL};
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(po[1], 1) < 0 || dup2(pe[1], 2) < 0)
            _exit(127);
        execve(gpuslice_bin, (char *const *)argv, envp);
        dprintf(2, "cannot run %s: %s; check the gpuslice= argument in plugstack.conf\n",
                gpuslice_bin, strerror(errno));
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        close(po[0]);
        close(pe[0]);
        return -1;
    }
    /* The helper prints a few env lines and at most one line on stderr: both
     * fit a pipe, so reading one after the other cannot block it. */
    slurp(po[0], out, len);
    slurp(pe[0], err, len);
    close(po[0]);
    close(pe[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The last non-empty line of text, into line. */
static void last_line(const char *text, char *line, size_t len)
{
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == ' '))
        end--;
    const char *start = end;
    while (start > text && start[-1] != '\n')
        start--;
    snprintf(line, len, "%.*s", (int)(end - start), start);
}

static void step_name(uint32_t step, char *buf, size_t len)
{
    if (step == STEP_BATCH)
        snprintf(buf, len, "batch");
    else if (step == STEP_EXTERN)
        snprintf(buf, len, "extern");
    else if (step == STEP_INTERACTIVE)
        snprintf(buf, len, "interactive");
    else
        snprintf(buf, len, "%u", step);
}

static void user_name(spank_t sp, uid_t uid, char *buf, size_t len)
{
    if (spank_getenv(sp, "SLURM_JOB_USER", buf, (int)len) == ESPANK_SUCCESS && buf[0])
        return;
    struct passwd pw, *found = NULL;
    char scratch[4096];
    buf[0] = '\0';
    if (getpwuid_r(uid, &pw, scratch, sizeof scratch, &found) == 0 && found)
        snprintf(buf, len, "%s", pw.pw_name);
}

/* Each NAME=value line of the helper's answer into the step's env;
 * LD_PRELOAD goes before the job's own. */
static int set_env(spank_t sp, char *answer)
{
    char *save = NULL;
    for (char *line = strtok_r(answer, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *value = eq + 1;
        char have[4096], both[8192];
        if (strcmp(line, "LD_PRELOAD") == 0 &&
            spank_getenv(sp, "LD_PRELOAD", have, sizeof have) == ESPANK_SUCCESS && have[0]) {
            snprintf(both, sizeof both, "%s %s", value, have);
            value = both;
        }
        if (spank_setenv(sp, line, value, 1) != ESPANK_SUCCESS) {
            slurm_error("gpuslice: job %u: cannot set %s in the step's env", job_id, line);
            return -1;
        }
    }
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (spank_context() != S_CTX_REMOTE)
        return 0;
    if (parse_args(ac, av) != 0)
        return -1;
    char shards[32], cards[256];
    /* A step without shards is not ours (a whole GPU, or none). */
    if (spank_getenv(sp, "SLURM_SHARDS_ON_NODE", shards, sizeof shards) != ESPANK_SUCCESS ||
        shards[0] == '\0' || strcmp(shards, "0") == 0)
        return 0;
    /* The node's GPU indices, as gres.conf numbers them: SLURM_STEP_GPUS or
     * SLURM_JOB_GPUS first, since with ConstrainDevices Slurm numbers
     * CUDA_VISIBLE_DEVICES from 0 inside the step's device cgroup. */
    static const char *const sources[] = {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
                                          "CUDA_VISIBLE_DEVICES"};
    cards[0] = '\0';
    for (size_t i = 0; i < sizeof sources / sizeof sources[0] && !cards[0]; i++)
        if (spank_getenv(sp, sources[i], cards, sizeof cards) != ESPANK_SUCCESS)
            cards[0] = '\0';
    uint32_t step;
    uid_t uid;
    gid_t gid;
    if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
        slurm_error("gpuslice: slurmstepd did not give the job's id, step, uid and gid");
        return -1;
    }
    char job_s[16], step_s[16], uid_s[16], gid_s[16], pid_s[16], user[256];
    snprintf(job_s, sizeof job_s, "%u", job_id);
    step_name(step, step_s, sizeof step_s);
    snprintf(uid_s, sizeof uid_s, "%u", (unsigned)uid);
    snprintf(gid_s, sizeof gid_s, "%u", (unsigned)gid);
    snprintf(pid_s, sizeof pid_s, "%d", (int)getpid());
    user_name(sp, uid, user, sizeof user);
    const char *args[] = {"admit", "--job", job_s, "--step", step_s, "--uid", uid_s,
                          "--gid", gid_s, "--pid", pid_s, "--cards", cards,
                          "--shards", shards, "--user", user, NULL};
    static char out[OUT_MAX], err[OUT_MAX];
    int rc = run_gpuslice(args, out, err, sizeof out);
    if (rc == 0) {
        holds = 1;
        return set_env(sp, out);
    }
    last_line(err, refusal, sizeof refusal);
    if (!refusal[0])
        snprintf(refusal, sizeof refusal, "gpuslice: job %u: %.256s slurm admit failed (exit %d)",
                 job_id, gpuslice_bin, rc);
    refused = 1;
    slurm_error("%s", refusal);
    return 0;
}

/* In each task, as the user, its stderr already the job's output. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (!refused)
        return 0;
    fprintf(stderr, "%s\n", refusal);
    fflush(stderr);
    /* The task must not run without its slice; exiting here rather than
     * returning an error keeps the output to the one line above. */
    _exit(1);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (spank_context() != S_CTX_REMOTE || !holds)
        return 0;
    char job_s[16], pid_s[16], out[512], err[512];
    snprintf(job_s, sizeof job_s, "%u", job_id);
    snprintf(pid_s, sizeof pid_s, "%d", (int)getpid());
    const char *args[] = {"release", "--job", job_s, "--pid", pid_s, NULL};
    if (run_gpuslice(args, out, err, sizeof out) != 0) {
        char line[512];
        last_line(err, line, sizeof line);
        slurm_error("gpuslice: job %u: release failed: %s", job_id, line);
    }
    return 0;
}

/* slurmd runs it as root when the job ends on the node, after scancel too:
 * what no step gave back (a slurmstepd that was killed) is released here. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    if (parse_args(ac, av) != 0)
        return -1;
    uint32_t job;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return 0;
    char job_s[16], out[512], err[512];
    snprintf(job_s, sizeof job_s, "%u", job);
    const char *args[] = {"release", "--job", job_s, NULL};
    if (run_gpuslice(args, out, err, sizeof out) != 0) {
        char line[512];
        last_line(err, line, sizeof line);
        slurm_error("gpuslice: job %u: release at the epilog failed: %s", job, line);
    }
    return 0;
}
