/*
 * The node accountant's write side, on the SQLite database that
 * ocihook/accountant.py creates (schema, migrations, card records and the
 * admission policy are its; this side reads and writes rows only, and
 * never creates a table). It opens only a file whose application_id and
 * user_version are gpuslice/statedb.h's. What fits a card, the words of a
 * refusal and the placement are admission.h's rule; the statements are
 * store.h's; the policy (placement, memory_overcommit, cores_limit) is the
 * policy table's row, read inside each admission. Each operation is one
 * BEGIN IMMEDIATE transaction, so hooks that start at the same moment
 * serialise on the database's write lock.
 */
#ifndef GS_ACCOUNTANT_H
#define GS_ACCOUNTANT_H

#include <stddef.h>
#include <stdint.h>

struct gs_str;

#define GS_BUSY_TIMEOUT_MS 30000

/* What one device of a container asks for (accountant.Request). */
struct gs_request {
    const char *container_id;
    const char *device;
    int64_t memory_mib;      /* ignored when exclusive: the whole card */
    int64_t cores;           /* 0: no compute cap */
    const char *priority;    /* a GPUSLICE_PRIORITY_*_WORD (gpuslice/limits.h): the column's CHECK */
    int exclusive;
    const char *const *card_uuids; /* n_cards == 0: any card, placement picks */
    size_t n_cards;
    const int64_t *pid;      /* NULL: unknown */
    const int64_t *pid_start;
    const char *runtime;
    const char *name;        /* the engine's name for the container; NULL: none */
    int64_t slices;          /* 0 or 1: one card; N > 1: a gang, one slice on each of N
                              * cards (gang.h), all or none */
    int mps;                 /* a slice of a card in MPS mode (the spec's --mps) */
};

struct gs_reservation {
    char *container_id, *device, *card_uuid, *runtime, *priority, *name;
    int64_t memory_mib, cores;
    int exclusive;
    int has_pid, has_pid_start;
    int64_t pid, pid_start;
    double created;
    int64_t card_index; /* of card_uuid, for the placement file; -1 unknown */
    int64_t slot;       /* its place in its gang, 0 for one card */
};

struct gs_reservations {
    struct gs_reservation *v;
    size_t n, cap;
};

void gs_reservations_free(struct gs_reservations *list);

struct gs_acct;

/* Open an existing database (never create one) and check that it is
 * gpuslice's, at this schema version. GS_OK, or GS_ERROR with the message.
 * state_dir: the node's, where an admission looks for the MPS control
 * daemons of cards in MPS mode (mpsdaemon.h); NULL: none is up. Kept, not
 * copied. */
int gs_acct_open(const char *path, const char *state_dir, struct gs_acct **out);
void gs_acct_close(struct gs_acct *a);

/* Reserve every request or none (all of one container), by the recorded
 * policy, after reclaiming dead reservations. GS_OK and one reservation
 * per request in out, what was reclaimed in reclaimed (their state dirs
 * are the caller's to remove), *first: the container held nothing before
 * (its state dir is to be made fresh); GS_NO with the refusal; GS_ERROR.
 * On GS_NO or GS_ERROR nothing was written and nothing is added to out or
 * reclaimed; a refusal (GS_NO) is recorded as a `refuse` event after the
 * rollback. A request already held (same container, device and, for one
 * card, card) gives the reservation it holds: the hook ran twice (a gang:
 * all its rows, by slot). A gang that no set of the node's cards could
 * ever hold (fewer cards than slices can take one) is GS_ERROR. */
int gs_acct_admit(struct gs_acct *a, const struct gs_request *reqs, size_t n,
                  struct gs_reservations *out, struct gs_reservations *reclaimed, int *first);

/* Drop all a container holds, an event of kind `why` for each row
 * ("release", "undo", "operator-release"); out gets what was held. */
int gs_acct_release(struct gs_acct *a, const char *container_id, const char *why,
                    struct gs_reservations *out);

/* A change of a held slice's figures (gpuslice resize). NULL: kept. */
struct gs_resize {
    const char *container_id;
    const char *device;
    const int64_t *memory_mib;
    const int64_t *cores;
};

/* Change the slice container_id holds for device, checked against its card
 * as an admission is (memory within total x memory_overcommit, cores
 * adding up to cores_limit, no growth on a card out of service) with what
 * the card's other reservations hold, and never below used_bytes (what the
 * container's processes hold now); one transaction, a `resize` event.
 * GS_OK and the row before and after; GS_NO with the refusal (its
 * numbers); GS_ERROR: a container that holds nothing, several devices or
 * another one, a whole card. Nothing is written unless GS_OK. */
int gs_acct_resize(struct gs_acct *a, const struct gs_resize *req, unsigned long long used_bytes,
                   struct gs_reservations *before, struct gs_reservations *after);

/* What fits each card now (gpuslice-hook room): for every card, by index,
 * one JSON object with its uuid, index, capacity_mib, reserved_mib, cores,
 * exclusive, free_mib and fits (per profile i, how many more slices of
 * memory_mib[i] and cores[i] the admission rule would take, health aside),
 * in {"policy_recorded": true|false, "cards": [...]}, added to json. With
 * no policy recorded, by overcommit GPUSLICE_POLICY_OVERCOMMIT_MIN and
 * cores_limit GPUSLICE_POLICY_CORES_LIMIT_MAX (statedb.h), the
 * configuration's defaults. One read snapshot, no write lock. */
int gs_acct_room(struct gs_acct *a, const int64_t *memory_mib, const int64_t *cores,
                 size_t nprofiles, struct gs_str *json);

/* Reclaim the reservations whose process is gone; out gets them. */
int gs_acct_gc(struct gs_acct *a, struct gs_reservations *out);

/* The open database and its name for messages, for a verb that keeps its
 * statements in a file of its own (claim.c). */
struct sqlite3;
struct sqlite3 *gs_acct_db(struct gs_acct *a);
const char *gs_acct_path(const struct gs_acct *a);

#endif
