/*
 * The accountant's SQL, inside the hook: the open database (struct
 * gs_acct) and every statement that reads or writes it. store.c opens and
 * checks the file, and holds the transaction and statement primitives;
 * rows.c the reads of cards, usage, policy and links, and the writes of
 * reservations and events. No rule lives here: what fits is admission.h's.
 * Statements are prepared per call: a hook makes a handful, and SQLite
 * prepares them in microseconds.
 */
#ifndef GS_STORE_H
#define GS_STORE_H

#include <sqlite3.h>

#include "accountant.h"
#include "admission.h"

struct gs_acct {
    sqlite3 *db;
    char *path;             /* for messages: one line (gs_quote) */
    struct gs_policy policy; /* read in each admission's transaction */
    const char *state_dir;   /* gs_acct_set_state_dir's: where MPS daemons listen */
    /* Why the last admission was refused, for its `refuse` event: the
     * class (a static string) and the card the line names ("" if none). */
    const char *refused_class, *refused_device; /* the device: the request's */
    char *refused_card;
};

/* ---- primitives (store.c) */
int gs_sql_fail(struct gs_acct *a);
sqlite3_stmt *gs_sql_prepare(struct gs_acct *a, const char *sql);
/* Step a statement that returns no row, and finalize it. */
int gs_sql_run(struct gs_acct *a, sqlite3_stmt *st);
void gs_sql_text(sqlite3_stmt *st, int i, const char *s);
char *gs_sql_col_text(sqlite3_stmt *st, int i);
int gs_sql_begin(struct gs_acct *a);
/* A read snapshot (BEGIN DEFERRED): takes no write lock. */
int gs_sql_begin_read(struct gs_acct *a);
/* Commit, or roll back and keep the message of code; GS_OK, GS_NO or GS_ERROR. */
int gs_sql_finish(struct gs_acct *a, int code);

/* ---- rows (rows.c) */
struct gs_reservation *gs_reservations_push(struct gs_reservations *list);
void gs_reservation_free(struct gs_reservation *r);
/* Every reservation WHERE the clause (one text parameter) holds, in list. */
int gs_select_reservations(struct gs_acct *a, const char *where, const char *param,
                           struct gs_reservations *list);
int gs_event(struct gs_acct *a, const char *kind, const char *cid, const char *card,
             const char *detail);
/* {"device": ..., "memory_mib": ...[, "pid": ...]}: release, undo, reclaim. */
int gs_dropped_event(struct gs_acct *a, const char *kind, const struct gs_reservation *r,
                     int with_pid);
int gs_reclaim_dead(struct gs_acct *a, struct gs_reservations *dead);
int gs_delete_container(struct gs_acct *a, const char *container_id);

/* The policy row into a->policy; no row: *recorded 0, a->policy as it was. */
int gs_read_policy(struct gs_acct *a, int *recorded);
/* The same, and no row is an error that says how to record one. */
int gs_load_policy(struct gs_acct *a);
int gs_load_cards(struct gs_acct *a, struct gs_card **out, size_t *n);
void gs_cards_free(struct gs_card *cards, size_t n);
int gs_card_usage(struct gs_acct *a, const struct gs_card *c, struct gs_usage *u);
int gs_load_links(struct gs_acct *a, struct gs_link **out, size_t *n);
void gs_links_free(struct gs_link *links, size_t n);
/* What this container already holds for req (the hook ran twice). */
int gs_existing(struct gs_acct *a, const struct gs_request *req, struct gs_reservations *out,
                int *found);
int gs_holds_any(struct gs_acct *a, const char *cid, int *any);
/* The row of req on card c, at slot, with its `admit` event; out gets it. */
int gs_insert(struct gs_acct *a, const struct gs_request *req, const struct gs_card *c,
              int64_t slot, struct gs_reservations *out);

#endif
