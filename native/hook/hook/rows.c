/*
 * The accountant's rows (see store.h): reservations, events, cards, the
 * policy and the links, read and written by name. A reservation is read
 * with SELECT * and each column found by its name, so the table's columns
 * are listed once, in ocihook/accountant.py's migrations.
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "gpuslice/limits.h"
#include "gpuslice/statedb.h"
#include "json.h"
#include "procs.h"
#include "util.h"

/* v (count used of *cap) with room for one more element of size bytes. */
static void *room_for_one(void *v, size_t count, size_t *cap, size_t size)
{
    if (count < *cap)
        return v;
    *cap = *cap ? *cap * 2 : 8;
    return gs_xrealloc(v, *cap * size);
}

/* ------------------------------------------------------ reservations */

struct gs_reservation *gs_reservations_push(struct gs_reservations *list)
{
    list->v = room_for_one(list->v, list->n, &list->cap, sizeof *list->v);
    struct gs_reservation *r = &list->v[list->n++];
    memset(r, 0, sizeof *r);
    r->card_index = -1;
    return r;
}

/* What one row owns; the row itself belongs to its list. */
void gs_reservation_free(struct gs_reservation *r)
{
    free(r->container_id);
    free(r->device);
    free(r->card_uuid);
    free(r->runtime);
    free(r->priority);
    free(r->name);
}

void gs_reservations_free(struct gs_reservations *list)
{
    for (size_t i = 0; i < list->n; i++)
        gs_reservation_free(&list->v[i]);
    free(list->v);
    list->v = NULL;
    list->n = list->cap = 0;
}

/* The columns a reservation is read from, by name. */
enum res_col { C_ID, C_DEVICE, C_CARD, C_MEMORY, C_CORES, C_EXCLUSIVE, C_PID, C_PID_START,
               C_RUNTIME, C_CREATED, C_PRIORITY, C_NAME, C_SLOT, C_COUNT };
static const char *const res_names[C_COUNT] = {
    "container_id", "device", "card_uuid", "memory_mib", "cores", "exclusive", "pid",
    "pid_start", "runtime", "created", "priority", "name", "slot"};

/* Where each column is in st's rows; a table without one is not the schema
 * the version promised. */
static int res_columns(struct gs_acct *a, sqlite3_stmt *st, int at[C_COUNT])
{
    int n = sqlite3_column_count(st);
    for (int c = 0; c < C_COUNT; c++) {
        at[c] = -1;
        for (int i = 0; i < n && at[c] < 0; i++)
            if (strcmp(sqlite3_column_name(st, i), res_names[c]) == 0)
                at[c] = i;
        if (at[c] < 0)
            return gs_fail("%s: not a usable gpuslice database: reservations has no column %s",
                           a->path, res_names[c]);
    }
    return GS_OK;
}

static void row_reservation(sqlite3_stmt *st, const int at[C_COUNT], struct gs_reservation *r)
{
    r->container_id = gs_sql_col_text(st, at[C_ID]);
    r->device = gs_sql_col_text(st, at[C_DEVICE]);
    r->card_uuid = gs_sql_col_text(st, at[C_CARD]);
    r->memory_mib = sqlite3_column_int64(st, at[C_MEMORY]);
    r->cores = sqlite3_column_int64(st, at[C_CORES]);
    r->exclusive = sqlite3_column_int64(st, at[C_EXCLUSIVE]) != 0;
    r->has_pid = sqlite3_column_type(st, at[C_PID]) != SQLITE_NULL;
    r->pid = sqlite3_column_int64(st, at[C_PID]);
    r->has_pid_start = sqlite3_column_type(st, at[C_PID_START]) != SQLITE_NULL;
    r->pid_start = sqlite3_column_int64(st, at[C_PID_START]);
    r->runtime = gs_sql_col_text(st, at[C_RUNTIME]);
    r->created = sqlite3_column_double(st, at[C_CREATED]);
    r->priority = gs_sql_col_text(st, at[C_PRIORITY]);
    r->name = gs_sql_col_text(st, at[C_NAME]);
    r->slot = sqlite3_column_int64(st, at[C_SLOT]);
}

/* Up to max rows of a SELECT * FROM reservations statement (already
 * bound) into list; 0: all. Finalizes st. */
static int rows(struct gs_acct *a, sqlite3_stmt *st, size_t max, struct gs_reservations *list)
{
    int at[C_COUNT];
    if (res_columns(a, st, at) != GS_OK) {
        sqlite3_finalize(st);
        return GS_ERROR;
    }
    int rc = SQLITE_ROW;
    for (size_t k = 0; max == 0 || k < max; k++) {
        if ((rc = sqlite3_step(st)) != SQLITE_ROW)
            break;
        row_reservation(st, at, gs_reservations_push(list));
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? GS_OK : gs_sql_fail(a);
}

int gs_select_reservations(struct gs_acct *a, const char *where, const char *param,
                           struct gs_reservations *list)
{
    struct gs_str sql = {0};
    gs_str_addf(&sql, "SELECT * FROM reservations%s%s", where ? " WHERE " : "",
                where ? where : "");
    sqlite3_stmt *st = gs_sql_prepare(a, sql.s);
    gs_str_free(&sql);
    if (!st)
        return GS_ERROR;
    if (param)
        gs_sql_text(st, 1, param);
    return rows(a, st, 0, list);
}

/* ----------------------------------------------------------- events */

/* INSERT INTO events; detail is a JSON object, its keys in alphabetical
 * order (as ocihook/accountant.py writes its own). */
int gs_event(struct gs_acct *a, const char *kind, const char *cid, const char *card,
             const char *detail)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "INSERT INTO events(at, kind, container_id, "
                                         "card_uuid, detail) VALUES (?, ?, ?, ?, ?)");
    if (!st)
        return GS_ERROR;
    sqlite3_bind_double(st, 1, gs_now());
    gs_sql_text(st, 2, kind);
    gs_sql_text(st, 3, cid);
    gs_sql_text(st, 4, card);
    gs_sql_text(st, 5, detail);
    return gs_sql_run(a, st);
}

int gs_dropped_event(struct gs_acct *a, const char *kind, const struct gs_reservation *r,
                     int with_pid)
{
    struct gs_str d = {0};
    gs_str_add(&d, "{\"device\": ");
    gs_json_quote(&d, r->device, strlen(r->device));
    gs_str_addf(&d, ", \"memory_mib\": %lld", (long long)r->memory_mib);
    if (with_pid) {
        if (r->has_pid)
            gs_str_addf(&d, ", \"pid\": %lld", (long long)r->pid);
        else
            gs_str_add(&d, ", \"pid\": null");
    }
    gs_str_addc(&d, '}');
    int rc = gs_event(a, kind, r->container_id, r->card_uuid, d.s);
    gs_str_free(&d);
    return rc;
}

/* ---------------------------------------------- reclaim and release */

int gs_reclaim_dead(struct gs_acct *a, struct gs_reservations *dead)
{
    struct gs_reservations all = {0};
    int rc = gs_select_reservations(a, NULL, NULL, &all);
    for (size_t i = 0; rc == GS_OK && i < all.n; i++) {
        struct gs_reservation *r = &all.v[i];
        if (gs_alive(r->has_pid ? &r->pid : NULL, r->has_pid_start ? &r->pid_start : NULL))
            continue;
        sqlite3_stmt *st = gs_sql_prepare(a, "DELETE FROM reservations WHERE container_id=? "
                                             "AND device=? AND card_uuid=?");
        if (!st) {
            rc = GS_ERROR;
            break;
        }
        gs_sql_text(st, 1, r->container_id);
        gs_sql_text(st, 2, r->device);
        gs_sql_text(st, 3, r->card_uuid);
        rc = gs_sql_run(a, st);
        if (rc == GS_OK)
            rc = gs_dropped_event(a, "reclaim", r, 1);
        if (rc == GS_OK) { /* hand the row over */
            *gs_reservations_push(dead) = *r;
            memset(r, 0, sizeof *r);
        }
    }
    gs_reservations_free(&all);
    return rc;
}

int gs_delete_container(struct gs_acct *a, const char *container_id)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "DELETE FROM reservations WHERE container_id=?");
    if (!st)
        return GS_ERROR;
    gs_sql_text(st, 1, container_id);
    return gs_sql_run(a, st);
}

/* ------------------------------------------------------------ cards */

void gs_cards_free(struct gs_card *cards, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(cards[i].uuid);
        free(cards[i].reason);
    }
    free(cards);
}

int gs_load_cards(struct gs_acct *a, struct gs_card **out, size_t *n)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "SELECT idx, uuid, total_mib, mig, healthy, "
                                         "health_reason, numa_node, mode FROM cards ORDER BY idx");
    if (!st)
        return GS_ERROR;
    struct gs_card *v = NULL;
    size_t count = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        v = room_for_one(v, count, &cap, sizeof *v);
        struct gs_card *c = &v[count++];
        c->index = sqlite3_column_int64(st, 0);
        c->uuid = gs_sql_col_text(st, 1);
        c->total_mib = sqlite3_column_int64(st, 2);
        c->mig = sqlite3_column_int64(st, 3) != 0;
        c->healthy = sqlite3_column_int64(st, 4) != 0;
        c->reason = gs_sql_col_text(st, 5);
        c->numa = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1
                                                            : (int)sqlite3_column_int64(st, 6);
        const unsigned char *mode = sqlite3_column_text(st, 7);
        c->mps = mode && strcmp((const char *)mode, GPUSLICE_MODE_MPS) == 0;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        gs_cards_free(v, count);
        return gs_sql_fail(a);
    }
    *out = v;
    *n = count;
    return GS_OK;
}

int gs_card_usage(struct gs_acct *a, const struct gs_card *c, struct gs_usage *u)
{
    memset(u, 0, sizeof *u);
    sqlite3_stmt *st = gs_sql_prepare(a, "SELECT container_id, memory_mib, cores, exclusive "
                                         "FROM reservations WHERE card_uuid=?");
    if (!st)
        return GS_ERROR;
    gs_sql_text(st, 1, c->uuid);
    char **ids = NULL;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        ids = room_for_one(ids, u->count, &cap, sizeof *ids);
        ids[u->count++] = gs_sql_col_text(st, 0);
        u->reserved_mib += sqlite3_column_int64(st, 1);
        u->cores += sqlite3_column_int64(st, 2);
        u->exclusive |= sqlite3_column_int64(st, 3) != 0;
    }
    sqlite3_finalize(st);
    u->holders = gs_holders(ids, u->count);
    return rc == SQLITE_DONE ? GS_OK : gs_sql_fail(a);
}

void gs_links_free(struct gs_link *links, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(links[i].card_a);
        free(links[i].card_b);
        free(links[i].pcie);
    }
    free(links);
}

int gs_load_links(struct gs_acct *a, struct gs_link **out, size_t *n)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "SELECT card_a, card_b, pcie, nvlinks FROM card_links");
    if (!st)
        return GS_ERROR;
    struct gs_link *v = NULL;
    size_t count = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        v = room_for_one(v, count, &cap, sizeof *v);
        v[count++] = (struct gs_link){gs_sql_col_text(st, 0), gs_sql_col_text(st, 1),
                                      gs_sql_col_text(st, 2), sqlite3_column_int64(st, 3)};
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        gs_links_free(v, count);
        return gs_sql_fail(a);
    }
    *out = v;
    *n = count;
    return GS_OK;
}

/* ----------------------------------------------------------- policy */

int gs_load_policy(struct gs_acct *a)
{
    int recorded;
    if (gs_read_policy(a, &recorded) != GS_OK)
        return GS_ERROR;
    if (!recorded)
        return gs_fail("%s: no admission policy recorded; run `gpuslice cdi generate` or "
                       "`gpuslice config apply` (they record the configuration's)", a->path);
    return GS_OK;
}

/* The policy row, checked against the table's rules once more (a CHECK
 * can be switched off by whoever writes the file). */
int gs_read_policy(struct gs_acct *a, int *recorded)
{
    static const char fix[] = "run `gpuslice config apply` (it records the configuration's)";
    sqlite3_stmt *st = gs_sql_prepare(a, "SELECT placement, memory_overcommit, cores_limit "
                                         "FROM policy WHERE id=1");
    if (!st)
        return GS_ERROR;
    int rc = sqlite3_step(st);
    *recorded = rc == SQLITE_ROW;
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? GS_OK : gs_sql_fail(a);
    }
    const char *placement = (const char *)sqlite3_column_text(st, 0);
    double overcommit = sqlite3_column_double(st, 1);
    int64_t cores_limit = sqlite3_column_int64(st, 2);
    int typed = sqlite3_column_type(st, 1) == SQLITE_FLOAT &&
                sqlite3_column_type(st, 2) == SQLITE_INTEGER;
    int r = GS_OK;
    if (!placement || (strcmp(placement, "binpack") != 0 && strcmp(placement, "spread") != 0)) {
        char *q = gs_quoted(placement ? placement : "", placement ? strlen(placement) : 0,
                            GS_AS_STRING);
        r = gs_fail("%s: policy placement %s is not binpack or spread; %s", a->path, q, fix);
        free(q);
    } else if (!typed || !(overcommit >= GPUSLICE_POLICY_OVERCOMMIT_MIN &&
                           overcommit <= GPUSLICE_POLICY_OVERCOMMIT_MAX))
        r = gs_fail("%s: policy memory_overcommit %g is not a number from %.1f to %.1f; %s",
                    a->path, overcommit, (double)GPUSLICE_POLICY_OVERCOMMIT_MIN,
                    (double)GPUSLICE_POLICY_OVERCOMMIT_MAX, fix);
    else if (cores_limit < GPUSLICE_POLICY_CORES_LIMIT_MIN ||
             cores_limit > GPUSLICE_POLICY_CORES_LIMIT_MAX)
        r = gs_fail("%s: policy cores_limit %lld is not a whole number from %d to %d; %s",
                    a->path, (long long)cores_limit, GPUSLICE_POLICY_CORES_LIMIT_MIN,
                    GPUSLICE_POLICY_CORES_LIMIT_MAX, fix);
    else
        a->policy = (struct gs_policy){overcommit, strcmp(placement, "spread") == 0
                                                       ? GS_SPREAD : GS_BINPACK, cores_limit};
    sqlite3_finalize(st);
    return r;
}

/* ------------------------------------------------------- admissions */

static int card_index_of(struct gs_acct *a, const char *uuid, int64_t *out)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "SELECT idx FROM cards WHERE uuid=?");
    if (!st)
        return GS_ERROR;
    gs_sql_text(st, 1, uuid);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? GS_OK : gs_sql_fail(a);
}

int gs_existing(struct gs_acct *a, const struct gs_request *req, struct gs_reservations *out,
                int *found)
{
    int one = req->n_cards == 1 && req->slices <= 1;
    sqlite3_stmt *st = gs_sql_prepare(a, one
        ? "SELECT * FROM reservations WHERE container_id=? AND device=? AND card_uuid=?"
        : "SELECT * FROM reservations WHERE container_id=? AND device=? ORDER BY slot");
    if (!st)
        return GS_ERROR;
    gs_sql_text(st, 1, req->container_id);
    gs_sql_text(st, 2, req->device);
    if (one)
        gs_sql_text(st, 3, req->card_uuids[0]);
    size_t from = out->n;
    /* A gang's rows, all of them (one transaction wrote them); else the first. */
    int rc = rows(a, st, req->slices <= 1 ? 1 : 0, out);
    *found = out->n > from;
    for (size_t i = from; rc == GS_OK && i < out->n; i++)
        rc = card_index_of(a, out->v[i].card_uuid, &out->v[i].card_index);
    return rc;
}

int gs_holds_any(struct gs_acct *a, const char *cid, int *any)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "SELECT 1 FROM reservations WHERE container_id=? "
                                         "LIMIT 1");
    if (!st)
        return GS_ERROR;
    gs_sql_text(st, 1, cid);
    int rc = sqlite3_step(st);
    *any = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? GS_OK : gs_sql_fail(a);
}

/* {"cores": .., "device": .., "exclusive": .., "memory_mib": .., "priority": ..[,
 * "slices": .., "slot": ..]} */
static int admit_event(struct gs_acct *a, const struct gs_request *req, const char *card,
                       int64_t memory, int64_t slot)
{
    struct gs_str d = {0};
    gs_str_addf(&d, "{\"cores\": %lld, \"device\": ", (long long)req->cores);
    gs_json_quote(&d, req->device, strlen(req->device));
    gs_str_addf(&d, ", \"exclusive\": %s, \"memory_mib\": %lld, \"priority\": ",
                req->exclusive ? "true" : "false", (long long)memory);
    gs_json_quote(&d, req->priority, strlen(req->priority));
    if (req->slices > 1)
        gs_str_addf(&d, ", \"slices\": %lld, \"slot\": %lld", (long long)req->slices,
                    (long long)slot);
    gs_str_addc(&d, '}');
    int rc = gs_event(a, "admit", req->container_id, card, d.s);
    gs_str_free(&d);
    return rc;
}

static int insert_row(struct gs_acct *a, const struct gs_reservation *r)
{
    sqlite3_stmt *st = gs_sql_prepare(a, "INSERT INTO reservations(container_id, device, "
                                         "card_uuid, memory_mib, cores, exclusive, pid, "
                                         "pid_start, runtime, created, priority, name, slot) "
                                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
    if (!st)
        return GS_ERROR;
    gs_sql_text(st, 1, r->container_id);
    gs_sql_text(st, 2, r->device);
    gs_sql_text(st, 3, r->card_uuid);
    sqlite3_bind_int64(st, 4, r->memory_mib);
    sqlite3_bind_int64(st, 5, r->cores);
    sqlite3_bind_int64(st, 6, r->exclusive ? 1 : 0);
    if (r->has_pid)
        sqlite3_bind_int64(st, 7, r->pid);
    if (r->has_pid_start)
        sqlite3_bind_int64(st, 8, r->pid_start);
    gs_sql_text(st, 9, r->runtime);
    sqlite3_bind_double(st, 10, r->created);
    gs_sql_text(st, 11, r->priority);
    gs_sql_text(st, 12, r->name);
    sqlite3_bind_int64(st, 13, r->slot);
    return gs_sql_run(a, st);
}

int gs_insert(struct gs_acct *a, const struct gs_request *req, const struct gs_card *c,
              int64_t slot, struct gs_reservations *out)
{
    struct gs_reservation *r = gs_reservations_push(out);
    r->container_id = gs_xstrdup(req->container_id);
    r->device = gs_xstrdup(req->device);
    r->card_uuid = gs_xstrdup(c->uuid);
    r->runtime = gs_xstrdup(req->runtime ? req->runtime : "");
    r->priority = gs_xstrdup(req->priority);
    r->name = gs_xstrdup(req->name ? req->name : "");
    r->memory_mib = req->exclusive ? c->total_mib : req->memory_mib;
    r->cores = req->cores;
    r->exclusive = req->exclusive;
    r->has_pid = req->pid != NULL;
    r->pid = req->pid ? *req->pid : 0;
    r->has_pid_start = req->pid_start != NULL;
    r->pid_start = req->pid_start ? *req->pid_start : 0;
    r->created = gs_now();
    r->card_index = c->index;
    r->slot = slot;
    int rc = insert_row(a, r);
    if (rc == GS_OK)
        rc = admit_event(a, req, c->uuid, r->memory_mib, slot);
    if (rc != GS_OK) { /* out gets only what was written */
        gs_reservation_free(r);
        out->n--;
    }
    return rc;
}
