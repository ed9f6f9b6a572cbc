/*
 * The accountant's verbs (see accountant.h): admit, release, reclaim, each
 * one transaction. An admission reads the cards, their usage and the
 * policy from the store (store.h), asks the rule (admission.h) which cards
 * to take or why none, and writes the rows; a refusal is recorded after
 * the rollback. Resizing is resize.c's.
 */
#include "accountant.h"

#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "gpuslice/statedb.h"
#include "json.h"
#include "mpsdaemon.h"
#include "store.h"
#include "util.h"

int gs_acct_gc(struct gs_acct *a, struct gs_reservations *out)
{
    if (gs_sql_begin(a) != GS_OK)
        return GS_ERROR;
    return gs_sql_finish(a, gs_reclaim_dead(a, out));
}

int gs_acct_release(struct gs_acct *a, const char *container_id, const char *why,
                    struct gs_reservations *out)
{
    if (gs_sql_begin(a) != GS_OK)
        return GS_ERROR;
    size_t first = out->n;
    int rc = gs_select_reservations(a, "container_id=?", container_id, out);
    if (rc == GS_OK)
        rc = gs_delete_container(a, container_id);
    for (size_t i = first; rc == GS_OK && i < out->n; i++)
        rc = gs_dropped_event(a, why, &out->v[i], 0);
    return gs_sql_finish(a, rc);
}

/* ---------------------------------------------------------- admit */

/* Keep what the `refuse` event of this admission will say. */
static void note_refusal(struct gs_acct *a, const struct gs_request *req,
                         const struct gs_refusal *r)
{
    if (!r->cls)
        return; /* not a refusal: bad input (a gang no node could hold) */
    a->refused_class = r->cls;
    a->refused_device = req->device;
    free(a->refused_card);
    a->refused_card = gs_xstrdup(r->card);
}

static int wanted(const struct gs_request *req, const char *uuid)
{
    if (req->n_cards == 0)
        return 1;
    for (size_t i = 0; i < req->n_cards; i++)
        if (strcmp(req->card_uuids[i], uuid) == 0)
            return 1;
    return 0;
}

/* The cards req may take, by index, with what each holds now. */
struct candidates {
    struct gs_card *cards;
    size_t ncards;
    struct gs_card **cand;
    struct gs_usage *use;
    size_t n, nuse;
};

static void candidates_free(struct candidates *c)
{
    for (size_t i = 0; i < c->nuse; i++)
        free(c->use[i].holders);
    free(c->use);
    free(c->cand);
    gs_cards_free(c->cards, c->ncards);
}

static int candidates_of(struct gs_acct *a, const struct gs_request *req, struct candidates *c)
{
    memset(c, 0, sizeof *c);
    if (gs_load_cards(a, &c->cards, &c->ncards) != GS_OK)
        return GS_ERROR;
    c->cand = gs_xmalloc((c->ncards ? c->ncards : 1) * sizeof *c->cand);
    c->use = gs_xmalloc((c->ncards ? c->ncards : 1) * sizeof *c->use);
    for (size_t i = 0; i < c->ncards; i++)
        if (wanted(req, c->cards[i].uuid))
            c->cand[c->n++] = &c->cards[i];
    /* One stat per MPS card asked for; a time card costs nothing more. */
    for (size_t i = 0; i < c->n; i++)
        c->cand[i]->mps_up = c->cand[i]->mps && gs_mps_daemon_up(a->state_dir, c->cand[i]->uuid);
    for (; c->nuse < c->n; c->nuse++)
        if (gs_card_usage(a, c->cand[c->nuse], &c->use[c->nuse]) != GS_OK) {
            free(c->use[c->nuse].holders);
            return GS_ERROR;
        }
    return GS_OK;
}

/* One slice on each of req->slices cards, in this transaction: all rows
 * or none (the caller rolls back on any failure). */
static int admit_gang(struct gs_acct *a, const struct gs_request *req,
                      const struct candidates *c, struct gs_refusal *refusal,
                      struct gs_reservations *out)
{
    struct gs_link *links = NULL;
    size_t nlinks = 0;
    if (gs_load_links(a, &links, &nlinks) != GS_OK)
        return GS_ERROR;
    size_t *pick = gs_xmalloc((size_t)req->slices * sizeof *pick);
    int rc = gs_place_gang(&a->policy, req, c->cand, c->use, c->n, links, nlinks, pick,
                           refusal);
    for (size_t k = 0; rc == GS_OK && k < (size_t)req->slices; k++)
        rc = gs_insert(a, req, c->cand[pick[k]], (int64_t)k, out);
    free(pick);
    gs_links_free(links, nlinks);
    return rc;
}

static int admit_locked(struct gs_acct *a, const struct gs_request *req,
                        struct gs_reservations *out)
{
    if (!req->container_id || !req->container_id[0])
        return gs_refuse("a container id is needed");
    int found;
    int rc = gs_existing(a, req, out, &found);
    if (rc != GS_OK || found)
        return rc; /* the hook ran twice: same answer */
    struct candidates c;
    struct gs_refusal refusal = {NULL, ""};
    size_t pick;
    if ((rc = candidates_of(a, req, &c)) != GS_OK)
        goto out;
    if (c.n == 0)
        rc = gs_refuse_unknown(req, &refusal);
    else if (req->slices > 1)
        rc = admit_gang(a, req, &c, &refusal, out);
    else if ((rc = gs_place_one(&a->policy, req, c.cand, c.use, c.n, &pick, &refusal)) == GS_OK)
        rc = gs_insert(a, req, c.cand[pick], 0, out);
    if (rc == GS_NO)
        note_refusal(a, req, &refusal);
out:
    candidates_free(&c);
    return rc;
}

/* After a refusal's rollback, its `refuse` event, in a transaction of its
 * own: {"device": ..., "reason": <class>}, the card the line names in
 * card_uuid. A refusal costs this one INSERT more, an admission nothing; if
 * it cannot be written, the refusal stands and its line is kept. */
static void refusal_event(struct gs_acct *a, const char *cid)
{
    char *why = gs_message_take();
    struct gs_str d = {0};
    gs_str_add(&d, "{\"device\": ");
    gs_json_quote(&d, a->refused_device, strlen(a->refused_device));
    gs_str_add(&d, ", \"reason\": ");
    gs_json_quote(&d, a->refused_class, strlen(a->refused_class));
    gs_str_addc(&d, '}');
    (void)gs_event(a, "refuse", cid, a->refused_card ? a->refused_card : "", d.s);
    gs_str_free(&d);
    gs_refuse("%s", why);
    free(why);
}

int gs_acct_admit(struct gs_acct *a, const struct gs_request *reqs, size_t n,
                  struct gs_reservations *out, struct gs_reservations *reclaimed, int *first)
{
    a->refused_class = NULL;
    if (gs_sql_begin(a) != GS_OK)
        return GS_ERROR;
    size_t held = out->n, dead = reclaimed->n;
    int any = 0;
    int rc = gs_load_policy(a);
    if (rc == GS_OK)
        rc = gs_reclaim_dead(a, reclaimed);
    if (rc == GS_OK && n > 0)
        rc = gs_holds_any(a, reqs[0].container_id, &any);
    for (size_t i = 0; rc == GS_OK && i < n; i++)
        rc = admit_locked(a, &reqs[i], out);
    rc = gs_sql_finish(a, rc);
    if (rc == GS_NO && a->refused_class)
        refusal_event(a, reqs[0].container_id);
    if (rc != GS_OK) { /* nothing was written: nothing is held, nothing reclaimed */
        for (size_t i = held; i < out->n; i++)
            gs_reservation_free(&out->v[i]);
        out->n = held;
        for (size_t i = dead; i < reclaimed->n; i++)
            gs_reservation_free(&reclaimed->v[i]);
        reclaimed->n = dead;
    }
    *first = !any;
    return rc;
}

/* ----------------------------------------------------------- room */

/* One card's object of gs_acct_room. */
static void room_card(const struct gs_policy *p, const struct gs_card *c,
                      const struct gs_usage *u, const int64_t *memory_mib,
                      const int64_t *cores, size_t nprofiles, struct gs_str *json)
{
    gs_str_add(json, "{\"uuid\": ");
    gs_json_quote(json, c->uuid, strlen(c->uuid));
    gs_str_addf(json, ", \"index\": %lld, \"capacity_mib\": %lld, \"reserved_mib\": %lld, "
                "\"cores\": %lld, \"exclusive\": %s, \"free_mib\": %lld, \"fits\": [",
                (long long)c->index, (long long)gs_capacity_mib(p, c),
                (long long)u->reserved_mib, (long long)u->cores,
                u->exclusive ? "true" : "false", (long long)gs_free_mib(p, c, u));
    for (size_t k = 0; k < nprofiles; k++)
        gs_str_addf(json, "%s%lld", k ? ", " : "",
                    (long long)gs_slices_that_fit(p, c, u, memory_mib[k], cores[k]));
    gs_str_add(json, "]}");
}

static int room_locked(struct gs_acct *a, const int64_t *memory_mib, const int64_t *cores,
                       size_t nprofiles, struct gs_str *json)
{
    int recorded;
    a->policy = (struct gs_policy){GPUSLICE_POLICY_OVERCOMMIT_MIN, GS_BINPACK,
                                   GPUSLICE_POLICY_CORES_LIMIT_MAX};
    struct gs_request any = {.device = "room"};
    struct candidates c;
    if (gs_read_policy(a, &recorded) != GS_OK)
        return GS_ERROR;
    int rc = candidates_of(a, &any, &c);
    if (rc == GS_OK) {
        gs_str_addf(json, "{\"policy_recorded\": %s, \"cards\": [",
                    recorded ? "true" : "false");
        for (size_t i = 0; i < c.n; i++) {
            gs_str_add(json, i ? ", " : "");
            room_card(&a->policy, c.cand[i], &c.use[i], memory_mib, cores, nprofiles, json);
        }
        gs_str_add(json, "]}");
    }
    candidates_free(&c);
    return rc;
}

int gs_acct_room(struct gs_acct *a, const int64_t *memory_mib, const int64_t *cores,
                 size_t nprofiles, struct gs_str *json)
{
    if (gs_sql_begin_read(a) != GS_OK)
        return GS_ERROR;
    int rc = room_locked(a, memory_mib, cores, nprofiles, json);
    /* Nothing was written: the end of a read is a commit or a rollback alike. */
    return gs_sql_finish(a, rc);
}
