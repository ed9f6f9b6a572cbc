/*
 * The environment, read once at init. Nothing here runs on a fast path.
 *
 * A malformed limit makes the process fail closed (every allocation is
 * refused with CUDA_ERROR_OUT_OF_MEMORY): a typo must not turn a capped
 * container into an uncapped one, and refusing memory is something every
 * CUDA program already handles, unlike abort().
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"
#include "gpuslice/c/priority.h"

#include <fcntl.h>
#include <unistd.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct gs_config gs_cfg;

#define SIZE_RULE                                                                             \
    "a whole number of bytes, or with a binary unit k/m/g/t (KiB/MiB/GiB/TiB, "               \
    "case-insensitive), at least 1MiB, or 0 for no cap"

int gs_parse_size(const char *text, unsigned long long *out)
{
    if (!text || *text < '0' || *text > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    if (*end) {
        static const struct { const char *unit; unsigned shift; } units[] = {
            {"b", 0},   {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},
            {"mib", 20}, {"g", 30}, {"gb", 30},  {"gib", 30}, {"t", 40},  {"tb", 40},
            {"tib", 40},
        };
        size_t i = 0, count = sizeof units / sizeof units[0];
        while (i < count && strcasecmp(end, units[i].unit) != 0)
            i++;
        if (i == count)
            return -1;
        shift = units[i].shift;
    }
    if (shift && n > (ULLONG_MAX >> shift))
        return -1;
    *out = n << shift;
    return 0;
}

/* One clear line naming the variable, the value and the rule. */
static void malformed(struct gs_config *cfg, const char *var, const char *value,
                      const char *rule)
{
    gs_log_write(GS_LOG_ERROR,
                 "%s=\"%s\" is malformed (expected %s); failing closed: every GPU memory "
                 "allocation in this process is refused",
                 var, value, rule);
    cfg->fail_closed = 1;
}

extern char **environ;

/* The last entry of name in the environment, as the runtimes give a
 * container's process its config.json env (runc sets each entry in turn: the
 * last one wins) and as the hook and gpuslice-runtime read it; getenv(3)
 * would find the first of two. */
const char *gs_env_last(const char *name)
{
    size_t n = strlen(name);
    const char *found = NULL;
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            found = *e + n + 1;
    return found;
}

static const char *env(const char *name)
{
    const char *v = gs_env_last(name);
    return v && *v ? v : NULL;
}

/* Our name wins over HAMi's alias; returns the value and the name it came from. */
static const char *env2(const char *ours, const char *alias, const char **which)
{
    const char *v = env(ours);
    *which = ours;
    if (!v && alias) {
        v = env(alias);
        *which = alias;
    }
    return v;
}

static void read_mem(struct gs_config *cfg, const char *var, const char *v,
                     unsigned long long *dst)
{
    unsigned long long n;
    if (gs_parse_size(v, &n) != 0 || (n != 0 && n < GS_MIB)) {
        malformed(cfg, var, v, SIZE_RULE);
        return;
    }
    *dst = n;
}

static void read_core(struct gs_config *cfg, const char *var, const char *v, unsigned *dst)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n < 0 || n > 100) {
        malformed(cfg, var, v, "an integer percentage 0-100, 0 for no cap");
        return;
    }
    *dst = (unsigned)n;
}

/* An absolute folder from var (or def), leaving `room` bytes for names. */
static void read_dir(struct gs_config *cfg, const char *var, const char *def, char *dst,
                     size_t size, size_t room, const char *rule)
{
    const char *v = env(var);
    if (!v)
        v = def;
    if (strlen(v) >= size - room || v[0] != '/') {
        malformed(cfg, var, v, rule);
        v = def;
    }
    snprintf(dst, size, "%s", v);
}

/* A setting of 1 or 0; anything else warns once, saying what holds, and
 * keeps the default (these settings steer, they never fail closed). */
static int read_switch(const char *name, int dflt, const char *kept)
{
    const char *v = env(name);
    if (!v)
        return dflt;
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
        return v[0] == '1';
    gs_log_write(GS_LOG_WARN, "%s=\"%s\" is malformed (expected 1 or 0); %s", name, v, kept);
    return dflt;
}

void gs_config_load(struct gs_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    const char *which, *v;
    char ours[64], alias[64];

    v = env(GPUSLICE_ENV_DISABLE);
    cfg->disabled = v && strcmp(v, "0") != 0;

    unsigned long long all = 0;
    unsigned core_all = 0;
    if ((v = env2(GPUSLICE_ENV_MEMORY_LIMIT, GPUSLICE_ENV_MEMORY_LIMIT_ALIAS, &which)))
        read_mem(cfg, which, v, &all);
    if ((v = env2(GPUSLICE_ENV_CORE_LIMIT, GPUSLICE_ENV_CORE_LIMIT_ALIAS, &which)))
        read_core(cfg, which, v, &core_all);
    for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
        cfg->mem_limit[i] = all;
        cfg->core_limit[i] = core_all;
        snprintf(ours, sizeof ours, GPUSLICE_ENV_MEMORY_LIMIT "_%d", i);
        snprintf(alias, sizeof alias, GPUSLICE_ENV_MEMORY_LIMIT_ALIAS "_%d", i);
        if ((v = env2(ours, alias, &which)))
            read_mem(cfg, which, v, &cfg->mem_limit[i]);
        snprintf(ours, sizeof ours, GPUSLICE_ENV_CORE_LIMIT "_%d", i);
        snprintf(alias, sizeof alias, GPUSLICE_ENV_CORE_LIMIT_ALIAS "_%d", i);
        if ((v = env2(ours, alias, &which)))
            read_core(cfg, which, v, &cfg->core_limit[i]);
        if (cfg->mem_limit[i])
            cfg->any_limit = 1;
        if (cfg->core_limit[i])
            cfg->any_core = 1;
    }

    /* A CUDA 13 context with PyTorch loaded measured ~520-610 MiB on an H200
     * (tests/gpu/check_shim.py prints it); the reservation must cover it, or
     * NVML from outside sees a slice exceed its cap. */
    cfg->context_reserve = 768 * GS_MIB;
    if ((v = env(GPUSLICE_ENV_CONTEXT_RESERVE))) {
        unsigned long long n;
        if (gs_parse_size(v, &n) != 0)
            malformed(cfg, GPUSLICE_ENV_CONTEXT_RESERVE, v,
                      "a whole number of bytes, or with a binary unit k/m/g/t");
        else
            cfg->context_reserve = n;
    }

    /* Room is kept for the file names appended to each. */
    read_dir(cfg, GPUSLICE_ENV_STATE_DIR, GPUSLICE_STATE_MOUNT, cfg->state_dir, sizeof cfg->state_dir,
             16, "an absolute path shorter than 496 bytes");

    /* Tenants of a card take turns unless told not to: turns only make caps
     * tighter, so a typo keeps them and nothing fails. */
    cfg->compute_turns = read_switch(GPUSLICE_ENV_COMPUTE_TURNS, 1, "tenants take turns");
    /* Gates: off until they have been measured on more cards (docs/compute-limit.md). */
    cfg->compute_gates = read_switch(GPUSLICE_ENV_COMPUTE_GATES, 0,
                                     "an uncapped process waits for turns on the host");
    /* Side by side: on, for with turns alone a host-bound neighbour of a cap
     * got less than plain time slicing gives it (docs/compute-limit.md, Side
     * by side); 0 keeps it waiting for capped holders' turns. */
    cfg->compute_side = read_switch(GPUSLICE_ENV_COMPUTE_SIDE, 1,
                                    "a host-bound uncapped process launches through capped turns");

    /* Priority orders who runs first; a typo must not stop the container. */
    cfg->priority = GPUSLICE_PRIORITY_NORMAL;
    if ((v = env(GPUSLICE_ENV_PRIORITY))) {
        int code = gpuslice_priority_code(v);
        if (code >= 0)
            cfg->priority = (unsigned)code;
        else
            gs_log_write(GS_LOG_WARN, GPUSLICE_ENV_PRIORITY "=\"%s\" is malformed (expected "
                         GPUSLICE_PRIORITY_HIGH_WORD ", " GPUSLICE_PRIORITY_NORMAL_WORD " or "
                         GPUSLICE_PRIORITY_LOW_WORD "); the container runs at "
                         GPUSLICE_PRIORITY_NORMAL_WORD " priority", v);
    }

    read_dir(cfg, GPUSLICE_ENV_CARD_DIR, GPUSLICE_STATE_MOUNT "/" GPUSLICE_CARDFILES_DIR, cfg->card_dir,
             sizeof cfg->card_dir, 128, "an absolute path shorter than 384 bytes");
}

/* The cards the accountant placed this container on: the placement file
 * (statedir.h), one "<index> <uuid>" line per card-less device.
 * Writes "GPU-a,GPU-b" to out; returns the number of cards, 0 if none. */
int gs_placement_load(struct gs_config *cfg, char *out, size_t len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/" GPUSLICE_PLACEMENT_FILE, cfg->state_dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    int cards = 0;
    size_t used = 0;
    out[0] = '\0';
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned idx;
        int end = 0;
        char uuid[GPUSLICE_UUID_SIZE];
        /* A whole GPU-<36 hex and dashes> and nothing else: the value goes
         * into the environment. */
        if (sscanf(line, "%u %95[GPU-0123456789abcdef]%n", &idx, uuid, &end) != 2 ||
            (line[end] != '\0' && line[end] != ' ') || strncmp(uuid, "GPU-", 4) != 0 ||
            strlen(uuid) != 40)
            continue;
        size_t need = strlen(uuid) + (cards ? 1 : 0);
        if (used + need + 1 > len || cards == GPUSLICE_MAX_DEVICES)
            break;
        used += (size_t)snprintf(out + used, len - used, "%s%s", cards ? "," : "", uuid);
        memcpy(cfg->placed[cards], uuid, sizeof uuid);
        cards++;
    }
    cfg->placed_count = cards;
    return cards;
}
