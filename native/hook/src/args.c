/*
 * Parsing and checking the command line (see args.h). Usage problems say
 * how the verb is used; a bad value names the option, the value (quoted
 * as a string, gs_quote) and the rule.
 */
#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "oci.h"
#include "procs.h"
#include "util.h"

static const char *const usages[] = {
    "gpuslice-hook create --device NAME --database DB --state-dir DIR [--card UUID]... "
    "[--exclusive] [--memory-mib N] [--cores N] [--priority high|normal|low] [--overcommit X] "
    "[--placement binpack|spread] [--cores-limit N] [--preload env|ld.so.preload]",
    "gpuslice-hook release --database DB --state-dir DIR [--id CID]",
    "gpuslice-hook gc --database DB --state-dir DIR",
    "gpuslice-hook admit --database DB [--state-dir DIR] --id CID --device NAME "
    "[--card UUID]... [--exclusive] [--memory-mib N] [--cores N] [--priority high|normal|low] "
    "[--overcommit X] [--placement binpack|spread] [--cores-limit N] [--pid N [--pid-start T]] "
    "[--runtime NAME]",
};

static const char help_text[] =
    "gpuslice-hook: admit a container to a GPU (createContainer), release it (poststop).\n"
    "\n"
    "  create   OCI state on stdin; admits, makes <state-dir>/containers/<id>, binds it at\n"
    "           /run/gpuslice in the rootfs\n"
    "  release  OCI state on stdin (poststop); with --id, an operator's release (no stdin)\n"
    "  gc       reclaims what containers whose process is gone still hold\n"
    "  admit    the accountant alone: prints \"<card uuid> <MiB>\" per reservation\n"
    "\n"
    "Request: --card UUID (repeatable; none: placement picks), --exclusive (whole card(s);\n"
    "several --card: all or none), --memory-mib N (a slice), --cores N (0-100, 0: no cap),\n"
    "--priority high|normal|low (a slice's; default normal).\n"
    "Policy: --overcommit X (1.0-16.0, default 1.0), --placement binpack|spread (default\n"
    "binpack), --cores-limit N (1-100, default 100).\n"
    "Exit: 0 ok, 1 refused, 2 bad input or usage.\n";

static const struct {
    const char *name;
    int takes_value;
    unsigned verbs;
} optdefs[O_COUNT] = {
    [O_DEVICE] = {"--device", 1, V_CREATE | V_ADMIT},
    [O_DATABASE] = {"--database", 1, V_CREATE | V_RELEASE | V_GC | V_ADMIT},
    /* admit makes no dir; it takes --state-dir so that callers can pass the
     * common arguments (--database, --state-dir) to every verb. */
    [O_STATE_DIR] = {"--state-dir", 1, V_CREATE | V_RELEASE | V_GC | V_ADMIT},
    [O_CARD] = {"--card", 1, REQUEST_VERBS},
    [O_EXCLUSIVE] = {"--exclusive", 0, REQUEST_VERBS},
    [O_MEMORY] = {"--memory-mib", 1, REQUEST_VERBS},
    [O_CORES] = {"--cores", 1, REQUEST_VERBS},
    [O_OVERCOMMIT] = {"--overcommit", 1, REQUEST_VERBS},
    [O_PLACEMENT] = {"--placement", 1, REQUEST_VERBS},
    [O_CORES_LIMIT] = {"--cores-limit", 1, REQUEST_VERBS},
    [O_PRELOAD] = {"--preload", 1, V_CREATE},
    [O_PRIORITY] = {"--priority", 1, REQUEST_VERBS},
    [O_ID] = {"--id", 1, V_RELEASE | V_ADMIT},
    [O_PID] = {"--pid", 1, V_ADMIT},
    [O_PID_START] = {"--pid-start", 1, V_ADMIT},
    [O_RUNTIME] = {"--runtime", 1, V_ADMIT},
};

static const char *usage_of(enum verb v)
{
    switch (v) {
    case V_CREATE: return usages[0];
    case V_RELEASE: return usages[1];
    case V_GC: return usages[2];
    case V_ADMIT: return usages[3];
    }
    return "";
}

/* A usage problem: the problem, then how the verb is used. fmt has one %s. */
static int usage_error(const struct gs_args *a, const char *fmt, const char *what)
{
    struct gs_str b = {0};
    gs_str_addf(&b, "%s: ", a->verb_name);
    gs_str_addf(&b, fmt, what);
    int rc = gs_fail("%s; usage: %s", b.s, usage_of(a->verb));
    gs_str_free(&b);
    return rc;
}

static char *quote(const char *s)
{
    return gs_quoted(s, strlen(s), GS_AS_STRING);
}

/* usage_error naming the first len bytes of s, quoted. */
static int usage_error_quoted(const struct gs_args *a, const char *fmt, const char *s, size_t len)
{
    char *r = gs_quoted(s, len, GS_AS_STRING);
    int rc = usage_error(a, fmt, r);
    free(r);
    return rc;
}

/* '<option> "<value>" <rule>' */
static int bad_value(enum opt o, const char *value, const char *rule)
{
    char *r = quote(value);
    int rc = gs_fail("%s %s %s", optdefs[o].name, r, rule);
    free(r);
    return rc;
}

/* A whole number in [lo, hi], digits only. */
static int whole(enum opt o, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;
    int ok = *s != '\0';
    for (const char *p = s; ok && *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - (*p - '0')) / 10)
            ok = 0;
        else
            v = v * 10 + (*p - '0');
    }
    if (ok && v >= lo && v <= hi) {
        *out = v;
        return GS_OK;
    }
    char rule[96];
    snprintf(rule, sizeof rule, "is not a whole number from %lld to %lld", (long long)lo,
             (long long)hi);
    return bad_value(o, s, rule);
}

/* One of n names: its index in *out, or a bad value that lists them all. */
static int choice(enum opt o, const char *s, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return GS_OK;
        }
    struct gs_str rule = {0};
    gs_str_add(&rule, "is not one of ");
    for (int i = 0; i < n; i++)
        gs_str_addf(&rule, "%s%s", i ? ", " : "", names[i]);
    int rc = bad_value(o, s, rule.s);
    gs_str_free(&rule);
    return rc;
}

static int check_overcommit(const char *s, double *out)
{
    /* digits[.digits]: no sign, exponent, hex, inf or nan */
    size_t i = strspn(s, "0123456789");
    if (i > 0 && s[i] == '.' && s[i + 1])
        i += 1 + strspn(s + i + 1, "0123456789");
    double v = i > 0 && s[i] == '\0' && i < 32 ? strtod(s, NULL) : 0;
    if (v < 1.0 || v > 16.0)
        return bad_value(O_OVERCOMMIT, s, "is not a number from 1.0 to 16.0");
    *out = v;
    return GS_OK;
}

/* A CDI device name (cdi/names.py validate_device_name): letters, digits
 * and _ - . : inside, a letter or digit at both ends; at most 128 here. */
static int check_device(const char *name)
{
    size_t n = strlen(name);
    char *r = quote(name);
    int rc = GS_OK;
#define ALNUM(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z') || \
                  ((c) >= '0' && (c) <= '9'))
    if (n == 0) {
        rc = gs_fail("--device: device name is empty");
    } else if (n > 128) {
        rc = gs_fail("--device: device name %s is over 128 characters", r);
    } else if (!ALNUM(name[0])) {
        rc = gs_fail("--device: device name %s must start with a letter or digit", r);
    } else {
        for (size_t i = 1; i + 1 < n && rc == GS_OK; i++) {
            char c = name[i];
            if (!ALNUM(c) && !strchr("_-.:", c)) {
                char *rc_ = quote((char[]){c, '\0'});
                rc = gs_fail("--device: device name %s has %s; only letters, digits and '_' "
                             "'-' '.' ':' are allowed", r, rc_);
                free(rc_);
            }
        }
        if (rc == GS_OK && !ALNUM(name[n - 1]))
            rc = gs_fail("--device: device name %s must end with a letter or digit", r);
    }
#undef ALNUM
    free(r);
    return rc;
}

static int check_card(const char *uuid)
{
    size_t n = strlen(uuid), ok = strspn(uuid, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                               "0123456789-_.:");
    if (n == 0 || n > 128 || ok != n)
        return bad_value(O_CARD, uuid, "is not a card UUID (1-128 letters, digits, '-', '_', "
                                       "'.', ':')");
    return GS_OK;
}

static int check_abs_path(enum opt o, const char *path)
{
    if (path[0] != '/')
        return bad_value(o, path, "is not an absolute path");
    if (strlen(path) >= 4096)
        return bad_value(o, path, "is over 4095 bytes");
    return GS_OK;
}

/* The choices of --placement (in enum gs_placement's order), --preload (its
 * index is preload_file) and --priority (the accountant's CHECK on the
 * column; cdi/profiles.py PRIORITIES). */
static const char *const placements[] = {"binpack", "spread"};
static const char *const preloads[] = {"env", "ld.so.preload"};
static const char *const priorities[] = {"high", "normal", "low"};
#define COUNT(v) ((int)(sizeof v / sizeof v[0]))

int gs_parse_args(int argc, char **argv, struct gs_args *a)
{
    memset(a, 0, sizeof *a);
    a->policy = (struct gs_policy){1.0, GS_BINPACK, 100};
    a->priority = "normal";
    a->cards = gs_xmalloc((size_t)argc * sizeof *a->cards);
    static const char general[] = "usage: gpuslice-hook create|release|gc|admit OPTIONS "
                                  "(gpuslice-hook --help says more)";
    if (argc < 2)
        return gs_fail("%s", general);
    const char *verb = argv[1];
    static const struct { const char *name; enum verb v; } verbs[] = {
        {"create", V_CREATE}, {"release", V_RELEASE}, {"gc", V_GC}, {"admit", V_ADMIT}};
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(verb, verbs[i].name) == 0)
            a->verb = verbs[i].v;
    if (!a->verb) {
        char *r = quote(verb);
        int rc = gs_fail("unknown command %s; %s", r, general);
        free(r);
        return rc;
    }
    a->verb_name = verb;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '='), *value = NULL;
        size_t len = eq && strncmp(arg, "--", 2) == 0 ? (size_t)(eq - arg) : strlen(arg);
        if (strncmp(arg, "--", 2) != 0 || len == 2)
            return usage_error_quoted(a, "unexpected argument %s", arg, strlen(arg));
        int o = 0;
        while (o < O_COUNT && !(strlen(optdefs[o].name) == len &&
                                strncmp(optdefs[o].name, arg, len) == 0))
            o++;
        if (o == O_COUNT || !(optdefs[o].verbs & a->verb))
            return usage_error_quoted(a, "unknown option %s", arg, len);
        if (optdefs[o].takes_value) {
            if (eq && len < strlen(arg))
                value = eq + 1;
            else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                value = argv[++i];
            else
                return usage_error(a, "%s needs a value", optdefs[o].name);
        } else {
            if (eq && len < strlen(arg))
                return usage_error(a, "%s takes no value", optdefs[o].name);
            value = "";
        }
        if (o == O_CARD) {
            for (size_t k = 0; k < a->n_cards; k++)
                if (strcmp(a->cards[k], value) == 0)
                    return bad_value(O_CARD, value, "is given twice");
            a->cards[a->n_cards++] = value;
        } else if (a->value[o]) {
            return usage_error(a, "%s is given twice", optdefs[o].name);
        }
        a->value[o] = value;
    }
    /* What each verb needs. */
    static const enum opt needed[][3] = {
        {O_DEVICE, O_DATABASE, O_STATE_DIR}, /* create */
        {O_DATABASE, O_STATE_DIR, O_DATABASE},
        {O_DATABASE, O_STATE_DIR, O_DATABASE},
        {O_DATABASE, O_ID, O_DEVICE}, /* admit */
    };
    int vi = a->verb == V_CREATE ? 0 : a->verb == V_RELEASE ? 1 : a->verb == V_GC ? 2 : 3;
    for (int k = 0; k < 3; k++)
        if (!a->value[needed[vi][k]])
            return usage_error(a, "%s is required", optdefs[needed[vi][k]].name);
    /* Each value against its rule. */
    const char *const *v = a->value;
    if (v[O_DEVICE] && check_device(v[O_DEVICE]) != GS_OK)
        return GS_ERROR;
    if (check_abs_path(O_DATABASE, v[O_DATABASE]) != GS_OK)
        return GS_ERROR;
    if (v[O_STATE_DIR] && check_abs_path(O_STATE_DIR, v[O_STATE_DIR]) != GS_OK)
        return GS_ERROR;
    for (size_t k = 0; k < a->n_cards; k++)
        if (check_card(a->cards[k]) != GS_OK)
            return GS_ERROR;
    if (v[O_MEMORY] && whole(O_MEMORY, v[O_MEMORY], 1, 16777216, &a->memory_mib) != GS_OK)
        return GS_ERROR;
    if (v[O_CORES] && whole(O_CORES, v[O_CORES], 0, 100, &a->cores) != GS_OK)
        return GS_ERROR;
    if (v[O_OVERCOMMIT] && check_overcommit(v[O_OVERCOMMIT], &a->policy.overcommit) != GS_OK)
        return GS_ERROR;
    int at;
    if (v[O_PLACEMENT]) {
        if (choice(O_PLACEMENT, v[O_PLACEMENT], placements, COUNT(placements), &at) != GS_OK)
            return GS_ERROR;
        a->policy.placement = (enum gs_placement)at;
    }
    if (v[O_CORES_LIMIT] &&
        whole(O_CORES_LIMIT, v[O_CORES_LIMIT], 1, 100, &a->policy.cores_limit) != GS_OK)
        return GS_ERROR;
    if (v[O_PRELOAD]) {
        if (choice(O_PRELOAD, v[O_PRELOAD], preloads, COUNT(preloads), &at) != GS_OK)
            return GS_ERROR;
        a->preload_file = at == 1;
    }
    if (v[O_PRIORITY]) {
        if (choice(O_PRIORITY, v[O_PRIORITY], priorities, COUNT(priorities), &at) != GS_OK)
            return GS_ERROR;
        a->priority = priorities[at];
    }
    if (v[O_ID] && !gs_container_id_ok(v[O_ID], strlen(v[O_ID])))
        return gs_container_id_error(v[O_ID], strlen(v[O_ID]));
    if (v[O_PID] && whole(O_PID, v[O_PID], 1, 2147483647, &a->pid) != GS_OK)
        return GS_ERROR;
    if (v[O_PID_START]) {
        if (!v[O_PID])
            return usage_error(a, "%s needs --pid", "--pid-start");
        if (whole(O_PID_START, v[O_PID_START], 0, INT64_MAX, &a->pid_start) != GS_OK)
            return GS_ERROR;
    }
    if (v[O_RUNTIME] && !gs_runtime_name_ok(v[O_RUNTIME]))
        return bad_value(O_RUNTIME, v[O_RUNTIME], "is not 1-32 letters, digits, '_', '.', '-'");
    /* The request: a slice needs memory; a whole card is all of it. */
    if (a->verb & REQUEST_VERBS) {
        if (v[O_EXCLUSIVE] && (v[O_MEMORY] || v[O_CORES]))
            return usage_error(a, "%s holds whole cards: --memory-mib and --cores do not go "
                               "with it", "--exclusive");
        /* A whole card is shared with no one, so no one stands aside for it. */
        if (v[O_EXCLUSIVE] && strcmp(a->priority, "normal") != 0)
            return usage_error_quoted(a, "--exclusive holds whole cards, which no one shares: "
                                      "--priority %s means nothing there; leave it out",
                                      v[O_PRIORITY], strlen(v[O_PRIORITY]));
        if (!v[O_EXCLUSIVE] && !v[O_MEMORY])
            return usage_error(a, "a slice needs %s N (or --exclusive for a whole card)",
                               "--memory-mib");
    }
    return GS_OK;
}

void gs_print_help(void)
{
    printf("%s\nusage:\n", help_text);
    for (size_t k = 0; k < sizeof usages / sizeof usages[0]; k++)
        printf("  %s\n", usages[k]);
}
