/*
 * gpuslice resize in the accountant (gs_acct_resize, accountant.h): the one
 * row a resize changes, checked by the admission rule (gs_resize_fits,
 * admission.h) against what its card's other reservations hold, updated
 * with a `resize` event, in one transaction.
 */
#include <stdlib.h>
#include <string.h>

#include "accountant.h"
#include "admission.h"
#include "json.h"
#include "store.h"
#include "util.h"

/* "container <id[:12]> holds N devices (a, b): ..." */
static int several_devices(const struct gs_reservations *held, int n, const char *cid)
{
    struct gs_str list = {0};
    for (size_t i = 0; i < held->n; i++)
        gs_str_addf(&list, "%s%s", i ? ", " : "", held->v[i].device);
    int r = gs_fail("container %.*s holds %zu devices (%s): its processes see one cap for all "
                    "of them, so only a container of one slice can be resized", n, cid, held->n,
                    list.s);
    gs_str_free(&list);
    return r;
}

/* The one row a resize changes: the container must hold exactly one, for
 * this device, a slice (the region's caps are one per CUDA ordinal, and the
 * spec's environment gives every ordinal of a container the same one). */
static int resized_row(struct gs_acct *a, const struct gs_resize *req,
                       struct gs_reservations *held)
{
    if (gs_select_reservations(a, "container_id=? ORDER BY device", req->container_id,
                               held) != GS_OK)
        return GS_ERROR;
    int n = (int)gs_utf8_prefix(req->container_id, 12);
    const char *cid = req->container_id;
    if (held->n == 0)
        return gs_fail("container %.*s holds nothing; `gpuslice status` lists what is held", n,
                       cid);
    int gang = held->n > 1 && !held->v[0].exclusive;
    for (size_t i = 1; gang && i < held->n; i++)
        gang = strcmp(held->v[i].device, held->v[0].device) == 0;
    if (gang)
        return gs_fail("container %.*s holds a gang of %zu slices (%s), one per card: a resize "
                       "changes one slice, so only a container of one slice can be resized; "
                       "start it again with another profile", n, cid, held->n,
                       held->v[0].device);
    if (held->n > 1)
        return several_devices(held, n, cid);
    const struct gs_reservation *r = &held->v[0];
    if (strcmp(r->device, req->device) != 0)
        return gs_fail("container %.*s holds device %s, not %s; name that one", n, cid,
                       r->device, req->device);
    if (r->exclusive)
        return gs_fail("container %.*s holds %s as a whole card, which has no slice to resize",
                       n, cid, r->device);
    return GS_OK;
}

/* The row's new figures, its `resize` event, and the row as it is now in after. */
static int write_resize(struct gs_acct *a, const struct gs_reservation *old, int64_t mem,
                        int64_t cores, int64_t card_index, struct gs_reservations *after)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "UPDATE reservations SET memory_mib=?, cores=? WHERE "
                                         "container_id=? AND device=? AND card_uuid=?");
    if (!st)
        return GS_ERROR;
    sqlite3_bind_int64(st, 1, mem);
    sqlite3_bind_int64(st, 2, cores);
    gs_sql_text(st, 3, old->container_id);
    gs_sql_text(st, 4, old->device);
    gs_sql_text(st, 5, old->card_uuid);
    if (gs_sql_run(a, st) != GS_OK)
        return GS_ERROR;
    struct gs_str d = {0};
    gs_str_addf(&d, "{\"cores\": %lld, \"device\": ", (long long)cores);
    gs_json_quote(&d, old->device, strlen(old->device));
    gs_str_addf(&d, ", \"memory_mib\": %lld, \"old_cores\": %lld, \"old_memory_mib\": %lld}",
                (long long)mem, (long long)old->cores, (long long)old->memory_mib);
    int rc = gs_event(a, "resize", old->container_id, old->card_uuid, d.s);
    gs_str_free(&d);
    if (rc != GS_OK)
        return rc;
    struct gs_reservation *r = gs_reservations_push(after);
    *r = *old;
    r->container_id = gs_xstrdup(old->container_id);
    r->device = gs_xstrdup(old->device);
    r->card_uuid = gs_xstrdup(old->card_uuid);
    r->runtime = gs_xstrdup(old->runtime);
    r->priority = gs_xstrdup(old->priority);
    r->name = gs_xstrdup(old->name);
    r->memory_mib = mem;
    r->cores = cores;
    r->card_index = card_index;
    return GS_OK;
}

static int resize_locked(struct gs_acct *a, const struct gs_resize *req,
                         unsigned long long used_bytes, struct gs_reservations *before,
                         struct gs_reservations *after)
{
    if (gs_load_policy(a) != GS_OK || resized_row(a, req, before) != GS_OK)
        return GS_ERROR;
    const struct gs_reservation *old = &before->v[0];
    int64_t mem = req->memory_mib ? *req->memory_mib : old->memory_mib;
    int64_t cores = req->cores ? *req->cores : old->cores;
    struct gs_card *cards = NULL, *c = NULL;
    size_t ncards = 0;
    if (gs_load_cards(a, &cards, &ncards) != GS_OK)
        return GS_ERROR;
    for (size_t i = 0; i < ncards && !c; i++)
        if (strcmp(cards[i].uuid, old->card_uuid) == 0)
            c = &cards[i];
    struct gs_usage u = {0};
    /* The used figure is the tenant's claim: it can only stop a shrink. */
    unsigned long long used_mib = (used_bytes + (1ull << 20) - 1) >> 20;
    int rc;
    if (!c)
        rc = gs_fail("%s: card %s is not known to the accountant; run `gpuslice cdi generate`",
                     req->device, old->card_uuid);
    else if ((rc = gs_card_usage(a, c, &u)) == GS_OK &&
             (rc = gs_resize_fits(&a->policy, c, &u, req->device, req->container_id,
                                  old->memory_mib, old->cores, mem, cores, used_mib)) == GS_OK)
        rc = write_resize(a, old, mem, cores, c->index, after);
    free(u.holders);
    gs_cards_free(cards, ncards);
    return rc;
}

int gs_acct_resize(struct gs_acct *a, const struct gs_resize *req, unsigned long long used_bytes,
                   struct gs_reservations *before, struct gs_reservations *after)
{
    if (gs_sql_begin(a) != GS_OK)
        return GS_ERROR;
    int rc = gs_sql_finish(a, resize_locked(a, req, used_bytes, before, after));
    if (rc != GS_OK) {
        gs_reservations_free(before);
        gs_reservations_free(after);
    }
    return rc;
}
