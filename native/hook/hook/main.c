/*
 * gpuslice-hook: the OCI hook that admits a container to a card, and
 * releases it. The command line, the six verbs, and the one line a
 * failure prints. The CDI spec passes the request and where things are as
 * arguments (no configuration file is read); the admission policy is the
 * accountant's.
 *
 *   create   createContainer: admit (or take over a claim, claim.h), make and
 *            mount the state dir, write a slice's caps into its region
 *   release  poststop (state on stdin), or an operator's (--id)
 *   gc       reclaim what dead containers hold
 *   admit    the accountant alone, for tests and operators
 *   resize   a held slice's new figures: the accountant, then the region
 *   room     what fits each card now, in JSON: the admission rule's answer
 *            for the Python readers (gpuslice status, the Nomad plugin)
 *
 * Exit 0 ok, 1 a refusal ("no": the card is full), 2 bad input or usage,
 * or a hook in a user namespace (userns.h), which is granted nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accountant.h"
#include "args.h"
#include "claim.h"
#include "json.h"
#include "oci.h"
#include "procs.h"
#include "regionlimits.h"
#include "rootfs.h"
#include "containerdir.h"
#include "userns.h"
#include "util.h"
#include "version.h"

/* What to do about a hook in a user namespace: a container's, an operator's. */
#define FIX_CONTAINER "run the container as root (sudo podman run ..., or a rootful podman " \
                      "service) without --userns or --uidmap"
#define FIX_OPERATOR "run gpuslice-hook as root on the host, outside any user namespace"

/* One request per card for --exclusive with several cards (all or none),
 * else one request whose cards are the candidates. */
static size_t build_requests(const struct gs_args *a, const char *cid, const int64_t *pid,
                             const int64_t *pid_start, const char *runtime,
                             struct gs_request **out)
{
    int each = a->value[O_EXCLUSIVE] && a->n_cards > 1;
    size_t n = each ? a->n_cards : 1;
    struct gs_request *reqs = gs_xmalloc(n * sizeof *reqs);
    for (size_t i = 0; i < n; i++) {
        reqs[i] = (struct gs_request){
            .container_id = cid,
            .device = a->value[O_DEVICE],
            .memory_mib = a->memory_mib,
            .cores = a->cores,
            .priority = a->priority,
            .exclusive = a->value[O_EXCLUSIVE] != NULL,
            .card_uuids = each ? &a->cards[i] : a->cards,
            .n_cards = each ? 1 : a->n_cards,
            .pid = pid,
            .pid_start = pid_start,
            .runtime = runtime,
            .slices = a->slices,
            .name = a->value[O_NAME],
            .mps = a->value[O_MPS] != NULL,
        };
    }
    *out = reqs;
    return n;
}

/* What an admission reclaimed from dead containers goes with their rows:
 * their state dirs and regions (the admitted container's own dir is
 * set_up's to make fresh). */
static void remove_reclaimed(const char *state_dir, const char *cid,
                             const struct gs_reservations *dead)
{
    for (size_t i = 0; i < dead->n; i++)
        if (strcmp(dead->v[i].container_id, cid) != 0)
            gs_remove_container_dir(state_dir, dead->v[i].container_id);
}

/* In the initial user namespace, GS_OK; else the line that says why
 * container cid gets no device (nothing is opened or written). */
static int granted_here(const char *cid, const char *device, const char *fix)
{
    struct gs_str who = {0};
    gs_str_addf(&who, "container %.*s: device %s is not granted", (int)gs_utf8_prefix(cid, 12),
                cid, device);
    int rc = gs_require_initial_userns(gs_str_cstr(&who), fix);
    gs_str_free(&who);
    return rc;
}

/* "container <id[:12]>: <why>": the refusal, one line. */
static int refused(const char *cid)
{
    char *why = gs_message_take();
    int n = (int)gs_utf8_prefix(cid, 12);
    gs_refuse("container %.*s: %s", n, cid, why);
    free(why);
    return GS_NO;
}

static int cmd_admit(const struct gs_args *a)
{
    const char *cid = a->value[O_ID];
    int64_t start = a->pid_start;
    const int64_t *pid = a->value[O_PID] ? &a->pid : NULL, *pid_start = NULL;
    if (granted_here(cid, a->value[O_DEVICE], FIX_OPERATOR) != GS_OK)
        return GS_ERROR;
    if (a->value[O_PID_START])
        pid_start = &start;
    else if (pid && gs_start_time(a->pid, &start))
        pid_start = &start;
    struct gs_acct *acct;
    if (gs_acct_open(a->value[O_DATABASE], a->value[O_STATE_DIR], &acct) != GS_OK)
        return GS_ERROR;
    struct gs_request *reqs;
    size_t n = build_requests(a, cid, pid, pid_start, a->value[O_RUNTIME], &reqs);
    struct gs_reservations held = {0}, dead = {0};
    int first;
    int rc = gs_acct_admit(acct, reqs, n, &held, &dead, &first);
    gs_acct_close(acct);
    free(reqs);
    /* admit makes no dir: a new container's leftover of its id goes too. */
    remove_reclaimed(a->value[O_STATE_DIR], rc == GS_OK && first ? "" : cid, &dead);
    gs_reservations_free(&dead);
    if (rc == GS_NO)
        rc = refused(cid);
    for (size_t i = 0; rc == GS_OK && i < held.n; i++)
        printf("%s %lld\n", held.v[i].card_uuid, (long long)held.v[i].memory_mib);
    gs_reservations_free(&held);
    return rc;
}

/* A slice's caps, as the accountant holds them, into the container's region
 * before any of its processes starts: the region is where a running
 * container's caps live (docs/architecture.md, Where a cap lives). A gang's
 * slices have one profile, so one figure caps each of its devices. On a
 * card in MPS mode (mps) the compute share is MPS's SM share, set by the
 * spec's env: the pacer is given no cap there. */
static int write_caps(const char *state_dir, const char *cid, const struct gs_reservations *held,
                      int mps)
{
    struct gs_caps_hold h;
    int rc = gs_caps_take(state_dir, cid, &h);
    if (rc != GS_OK) {
        gs_caps_leave(&h);
        return rc;
    }
    const struct gs_reservation *r = &held->v[0];
    return gs_caps_write(&h, (long long)r->memory_mib, mps ? 0 : (long long)r->cores,
                         r->priority);
}

/* After admission: the state dir (fresh for a container that held nothing
 * before: what an earlier container of this id left, its region above all,
 * is not this one's), a slice's caps, the placement, the mounts, the preload. */
static int set_up(const struct gs_args *a, const struct gs_state *st, const struct gs_bundle *cfg,
                  const struct gs_request *req, size_t nreq, const struct gs_reservations *held,
                  int first)
{
    const char *state_dir = a->value[O_STATE_DIR];
    int dirfd = -1, rc;
    char *path = NULL, *rootfs = NULL;
    rc = gs_make_container_dir(state_dir, st->id, cfg->uid, cfg->gid, first, &dirfd, &path);
    if (rc == GS_OK && !req->exclusive && held->n > 0)
        rc = write_caps(state_dir, st->id, held, req->mps);
    /* Cards the accountant picked (no card, or several to pick from; a
     * gang's, by slot): the shim shows CUDA only the cards listed in
     * `placement`, in its order. */
    int placed = nreq == 1 && (req->n_cards != 1 || req->slices > 1) &&
                 (held->n == 1 || req->slices > 1);
    for (size_t i = 0; rc == GS_OK && placed && i < held->n; i++) {
        if (held->v[i].card_index < 0)
            rc = gs_fail("card %s is not known to the accountant", held->v[i].card_uuid);
        else
            rc = gs_write_placement(dirfd, path, held->v[i].card_index, held->v[i].card_uuid);
    }
    if (rc == GS_OK)
        rc = gs_rootfs_of(st->bundle, cfg, &rootfs);
    /* Everything that can fail on a hostile rootfs, then the mounts. */
    struct gs_mounts m = {-1, -1, -1, -1, NULL};
    if (rc == GS_OK)
        rc = gs_mounts_prepare(dirfd, path, state_dir, rootfs, &m);
    if (rc == GS_OK && a->preload_file && !req->exclusive)
        rc = gs_add_to_ld_so_preload(rootfs);
    if (rc == GS_OK)
        rc = gs_mounts_bind(&m);
    gs_mounts_close(&m);
    if (dirfd >= 0)
        close(dirfd);
    free(path);
    free(rootfs);
    return rc;
}

static int cmd_create(const struct gs_args *a)
{
    struct gs_state st;
    struct gs_bundle cfg = {0};
    struct gs_acct *acct = NULL;
    struct gs_request *reqs = NULL;
    struct gs_reservations held = {0}, dead = {0};
    int first = 0;
    int rc = gs_read_state(0, &st);
    if (rc != GS_OK)
        return rc;
    /* Before anything is read from the bundle or opened: a rootless
     * container would otherwise fail on the database, in SQLite's words. */
    if ((rc = granted_here(st.id, a->value[O_DEVICE], FIX_CONTAINER)) != GS_OK ||
        (rc = gs_read_bundle(st.bundle, &cfg)) != GS_OK ||
        (rc = gs_acct_open(a->value[O_DATABASE], a->value[O_STATE_DIR], &acct)) != GS_OK)
        goto out;
    int has_pid;
    int64_t pid, start;
    char runtime[33];
    gs_host_pid(st.has_pid, st.pid, &has_pid, &pid);
    int has_start = has_pid && pid != 0 && gs_start_time(pid, &start);
    gs_runtime_of(has_pid, pid, runtime);
    size_t n = build_requests(a, st.id, has_pid ? &pid : NULL, has_start ? &start : NULL,
                              runtime, &reqs);
    for (size_t i = 0; i < n; i++)
        reqs[i].name = cfg.name;
    /* A slice reserved for this container (claim.h) is taken over first;
     * the admission then finds it held and gives it as it is. */
    int taken = 0, claim_first = 0;
    if (cfg.claim && (rc = gs_claim_take(acct, cfg.claim, reqs, n, &taken, &claim_first)) != GS_OK)
        goto out;
    rc = gs_acct_admit(acct, reqs, n, &held, &dead, &first);
    remove_reclaimed(a->value[O_STATE_DIR], st.id, &dead);
    if (rc == GS_NO) {
        rc = refused(st.id);
        goto out;
    }
    if (rc != GS_OK)
        goto out;
    /* The note only tells the plugin which container serves its task now:
     * a start never fails for it. */
    if (taken)
        first = claim_first;
    else if (cfg.claim && held.n == 1 && gs_claim_note(acct, cfg.claim, &held.v[0]) != GS_OK)
        free(gs_message_take());
    rc = set_up(a, &st, &cfg, reqs, n, &held, first);
    if (rc != GS_OK) { /* nothing held for a container that cannot start */
        char *why = gs_message_take();
        struct gs_reservations undone = {0};
        int undo = gs_acct_release(acct, st.id, "undo", &undone);
        gs_reservations_free(&undone);
        gs_remove_container_dir(a->value[O_STATE_DIR], st.id);
        if (undo == GS_OK) {
            gs_fail("%s", why);
        } else {
            char *also = gs_message_take();
            gs_fail("%s; and undoing the admission failed: %s", why, also);
            free(also);
        }
        free(why);
        rc = GS_ERROR;
    }
out:
    gs_reservations_free(&held);
    gs_reservations_free(&dead);
    free(reqs);
    gs_acct_close(acct);
    gs_bundle_free(&cfg);
    gs_state_free(&st);
    return rc;
}

static int cmd_release(const struct gs_args *a)
{
    const char *db = a->value[O_DATABASE], *state_dir = a->value[O_STATE_DIR];
    const char *cid = a->value[O_ID];
    struct gs_state st = {0};
    long long host_uid;
    if (cid && gs_require_initial_userns("release", FIX_OPERATOR) != GS_OK)
        return GS_ERROR;
    /* A poststop in a user namespace: its create was there too, and was
     * granted nothing; nothing to give back, and nothing more to say. */
    if (!cid && gs_in_initial_userns(&host_uid) == 0)
        return GS_OK;
    if (!cid) { /* poststop: the state on stdin */
        int rc = gs_read_state(0, &st);
        if (rc != GS_OK)
            return rc;
        cid = st.id;
    }
    struct gs_acct *acct;
    struct gs_reservations held = {0};
    int rc = gs_acct_open(db, state_dir, &acct);
    if (rc == GS_OK) {
        rc = gs_acct_release(acct, cid, a->value[O_ID] ? "operator-release" : "release", &held);
        gs_acct_close(acct);
    }
    if (rc == GS_OK && a->value[O_ID] && held.n == 0) {
        rc = gs_refuse("container %s holds nothing", cid);
    } else if (rc == GS_OK) {
        gs_remove_container_dir(state_dir, cid);
        for (size_t i = 0; a->value[O_ID] && i < held.n; i++) {
            const struct gs_reservation *r = &held.v[i];
            printf("released %.*s %s: %lld MiB on %s\n", (int)gs_utf8_prefix(r->container_id, 12),
                   r->container_id, r->device, (long long)r->memory_mib, r->card_uuid);
        }
    }
    gs_reservations_free(&held);
    gs_state_free(&st);
    return rc;
}

static int cmd_gc(const struct gs_args *a)
{
    struct gs_acct *acct;
    struct gs_reservations dead = {0};
    if (gs_require_initial_userns("gc", FIX_OPERATOR) != GS_OK)
        return GS_ERROR;
    int rc = gs_acct_open(a->value[O_DATABASE], a->value[O_STATE_DIR], &acct);
    if (rc != GS_OK)
        return rc;
    rc = gs_acct_gc(acct, &dead);
    gs_acct_close(acct);
    for (size_t i = 0; rc == GS_OK && i < dead.n; i++) {
        const struct gs_reservation *r = &dead.v[i];
        gs_remove_container_dir(a->value[O_STATE_DIR], r->container_id);
        char pid[24] = "None";
        if (r->has_pid)
            snprintf(pid, sizeof pid, "%lld", (long long)r->pid);
        printf("reclaimed %.*s %s: %lld MiB on %s (pid %s is gone)\n",
               (int)gs_utf8_prefix(r->container_id, 12), r->container_id, r->device,
               (long long)r->memory_mib, r->card_uuid, pid);
    }
    if (rc == GS_OK && dead.n == 0) /* an answer either way, for the operator who asked */
        printf("nothing to reclaim: every holder whose process is recorded is alive\n");
    gs_reservations_free(&dead);
    return rc;
}

/* The region first, its locks held through the transaction: the container's
 * processes allocate nothing between the reading of what they hold and the
 * new cap, and none starts with the old one meanwhile. */
static int cmd_resize(const struct gs_args *a)
{
    const char *cid = a->value[O_ID];
    if (granted_here(cid, a->value[O_DEVICE], FIX_OPERATOR) != GS_OK)
        return GS_ERROR;
    struct gs_acct *acct;
    if (gs_acct_open(a->value[O_DATABASE], a->value[O_STATE_DIR], &acct) != GS_OK)
        return GS_ERROR;
    struct gs_caps_hold h;
    int rc = gs_caps_take(a->value[O_STATE_DIR], cid, &h);
    struct gs_reservations before = {0}, after = {0};
    const struct gs_resize req = {
        .container_id = cid,
        .device = a->value[O_DEVICE],
        .memory_mib = a->value[O_MEMORY] ? &a->memory_mib : NULL,
        .cores = a->value[O_CORES] ? &a->cores : NULL,
    };
    if (rc == GS_OK)
        rc = gs_acct_resize(acct, &req, h.used_bytes, &before, &after);
    gs_acct_close(acct);
    if (rc == GS_OK) {
        const struct gs_reservation *o = &before.v[0], *r = &after.v[0];
        rc = gs_caps_write(&h, (long long)r->memory_mib, (long long)r->cores, r->priority);
        if (rc != GS_OK) {
            char *why = gs_message_take();
            gs_fail("the accountant holds the new slice, but %s", why);
            free(why);
        } else {
            printf("resized %.*s %s: %lld MiB, %lld%% (was %lld MiB, %lld%%) on %s\n",
                   (int)gs_utf8_prefix(cid, 12), cid, r->device, (long long)r->memory_mib,
                   (long long)r->cores, (long long)o->memory_mib, (long long)o->cores,
                   r->card_uuid);
        }
    } else {
        gs_caps_leave(&h);
        if (rc == GS_NO)
            rc = refused(cid);
    }
    gs_reservations_free(&before);
    gs_reservations_free(&after);
    return rc;
}

/* Read-only: grants nothing, so a user namespace is no concern here (the
 * database's permissions are). */
static int cmd_room(const struct gs_args *a)
{
    struct gs_acct *acct;
    if (gs_acct_open(a->value[O_DATABASE], a->value[O_STATE_DIR], &acct) != GS_OK)
        return GS_ERROR;
    struct gs_str json = {0};
    int rc = gs_acct_room(acct, a->profile_mib, a->profile_cores, a->n_profiles, &json);
    gs_acct_close(acct);
    if (rc == GS_OK)
        printf("%s\n", json.s);
    gs_str_free(&json);
    return rc;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || (i == 1 && strcmp(argv[i], "-h") == 0)) {
            gs_print_help();
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("gpuslice-hook version %s\n", GPUSLICE_VERSION);
            return 0;
        }
    struct gs_args a;
    int rc = gs_parse_args(argc, argv, &a);
    if (rc == GS_OK) {
        switch (a.verb) {
        case V_CREATE: rc = cmd_create(&a); break;
        case V_RELEASE: rc = cmd_release(&a); break;
        case V_GC: rc = cmd_gc(&a); break;
        case V_ADMIT: rc = cmd_admit(&a); break;
        case V_RESIZE: rc = cmd_resize(&a); break;
        case V_ROOM: rc = cmd_room(&a); break;
        }
    }
    gs_args_free(&a);
    if (fflush(stdout) != 0 && rc == GS_OK)
        rc = gs_fail("stdout: %s", strerror(errno));
    if (rc != GS_OK) { /* one line, whatever a database row put in it */
        char *line = gs_quoted(gs_message(), strlen(gs_message()), GS_AS_PATH);
        fprintf(stderr, "gpuslice-hook: %s%s\n", rc == GS_ERROR ? "error: " : "", line);
        free(line);
    }
    return rc;
}
