/*
 * Claims (see claim.h) in the accountant: the takeover of the reserved row,
 * the event that tells the plugin which container serves its reservation.
 */
#include "claim.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"
#include "util.h"

static int sql_fail(struct gs_acct *a)
{
    return gs_fail("%s: %s", gs_acct_path(a), sqlite3_errmsg(gs_acct_db(a)));
}

static void text(sqlite3_stmt *st, int i, const char *s)
{
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
}

static int exec(struct gs_acct *a, const char *sql)
{
    return sqlite3_exec(gs_acct_db(a), sql, NULL, NULL, NULL) == SQLITE_OK ? GS_OK : sql_fail(a);
}

static int claim_event(struct gs_acct *a, const char *cid, const char *card, const char *claim_id,
                       const char *device, int taken)
{
    struct gs_str d = {0};
    gs_str_add(&d, "{\"claim\": ");
    gs_json_quote(&d, claim_id, strlen(claim_id));
    gs_str_add(&d, ", \"device\": ");
    gs_json_quote(&d, device, strlen(device));
    gs_str_addf(&d, ", \"taken\": %s}", taken ? "true" : "false");
    sqlite3_stmt *st = NULL;
    int rc = GS_OK;
    if (sqlite3_prepare_v2(gs_acct_db(a), "INSERT INTO events(at, kind, container_id, "
                           "card_uuid, detail) VALUES (?, 'claim', ?, ?, ?)", -1, &st,
                           NULL) != SQLITE_OK) {
        rc = sql_fail(a);
    } else {
        sqlite3_bind_double(st, 1, gs_now());
        text(st, 2, cid);
        text(st, 3, card);
        text(st, 4, d.s);
        rc = sqlite3_step(st) == SQLITE_DONE ? GS_OK : sql_fail(a);
    }
    sqlite3_finalize(st);
    gs_str_free(&d);
    return rc;
}

/* The takeover's statements, inside the transaction. */
static int take_locked(struct gs_acct *a, const char *claim_id, const struct gs_request *r,
                       int *taken, int *first)
{
    sqlite3 *db = gs_acct_db(a);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM reservations WHERE container_id=? LIMIT 1", -1,
                           &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return sql_fail(a);
    }
    text(st, 1, r->container_id);
    int step = sqlite3_step(st);
    sqlite3_finalize(st);
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        return sql_fail(a);
    *first = step == SQLITE_DONE;
    /* The row of the claim with exactly this request, on a card in service
     * that the request may use; its card for the event. */
    struct gs_str sql = {0};
    gs_str_add(&sql, "SELECT card_uuid FROM reservations WHERE container_id=? AND device=? AND "
                     "exclusive=0 AND memory_mib=? AND cores=? AND priority=? AND card_uuid IN "
                     "(SELECT uuid FROM cards WHERE healthy=1)");
    if (r->n_cards) {
        gs_str_add(&sql, " AND card_uuid IN (");
        for (size_t i = 0; i < r->n_cards; i++)
            gs_str_add(&sql, i ? ", ?" : "?");
        gs_str_addc(&sql, ')');
    }
    gs_str_add(&sql, " LIMIT 1");
    int rc = sqlite3_prepare_v2(db, sql.s, -1, &st, NULL) == SQLITE_OK ? GS_OK : sql_fail(a);
    gs_str_free(&sql);
    char *card = NULL;
    if (rc == GS_OK) {
        text(st, 1, claim_id);
        text(st, 2, r->device);
        sqlite3_bind_int64(st, 3, r->memory_mib);
        sqlite3_bind_int64(st, 4, r->cores);
        text(st, 5, r->priority);
        for (size_t i = 0; i < r->n_cards; i++)
            text(st, 6 + (int)i, r->card_uuids[i]);
        step = sqlite3_step(st);
        if (step == SQLITE_ROW)
            card = gs_xstrdup((const char *)sqlite3_column_text(st, 0));
        else if (step != SQLITE_DONE)
            rc = sql_fail(a);
    }
    sqlite3_finalize(st);
    if (rc != GS_OK || !card)
        return rc;
    if (sqlite3_prepare_v2(db, "UPDATE reservations SET container_id=?, pid=?, pid_start=?, "
                           "runtime=?, name=? WHERE container_id=? AND device=? AND "
                           "card_uuid=?", -1, &st, NULL) != SQLITE_OK) {
        rc = sql_fail(a);
    } else {
        text(st, 1, r->container_id);
        if (r->pid)
            sqlite3_bind_int64(st, 2, *r->pid);
        if (r->pid_start)
            sqlite3_bind_int64(st, 3, *r->pid_start);
        text(st, 4, r->runtime ? r->runtime : "");
        text(st, 5, r->name ? r->name : "");
        text(st, 6, claim_id);
        text(st, 7, r->device);
        text(st, 8, card);
        rc = sqlite3_step(st) == SQLITE_DONE ? GS_OK : sql_fail(a);
    }
    sqlite3_finalize(st);
    if (rc == GS_OK)
        rc = claim_event(a, r->container_id, card, claim_id, r->device, 1);
    *taken = rc == GS_OK;
    free(card);
    return rc;
}

/* The row's id: the prefix and the token's hash (gpuslice/claim.h), never
 * the token: ids are shown (status, the exporter's labels, events). */
static char *claim_id_of(const char *token)
{
    char hash[GS_SHA256_HEX_LEN + 1];
    gs_sha256_hex(token, strlen(token), hash);
    struct gs_str id = {0};
    gs_str_addf(&id, "%s%s", GPUSLICE_CLAIM_ID_PREFIX, hash);
    return gs_str_take(&id);
}

int gs_claim_take(struct gs_acct *a, const char *token, const struct gs_request *reqs, size_t n,
                  int *taken, int *first)
{
    *taken = 0;
    *first = 0;
    if (n != 1 || reqs[0].exclusive)
        return GS_OK;
    if (exec(a, "BEGIN IMMEDIATE") != GS_OK)
        return GS_ERROR;
    char *id = claim_id_of(token);
    int rc = take_locked(a, id, &reqs[0], taken, first);
    free(id);
    if (rc == GS_OK && exec(a, "COMMIT") == GS_OK)
        return GS_OK;
    char *why = gs_message_take();
    sqlite3_exec(gs_acct_db(a), "ROLLBACK", NULL, NULL, NULL);
    gs_fail("%s", why);
    free(why);
    *taken = 0;
    return GS_ERROR;
}

int gs_claim_note(struct gs_acct *a, const char *token, const struct gs_reservation *held)
{
    char *id = claim_id_of(token);
    int rc = claim_event(a, held->container_id, held->card_uuid, id, held->device, 0);
    free(id);
    return rc;
}
