/*
 * The accountant on SQLite (see accountant.h): open and check the database,
 * admit with the rules and messages of docs/architecture.md, release,
 * reclaim the dead. Statements are prepared per call: a hook makes a
 * handful, and SQLite prepares them in microseconds.
 */
#include "accountant.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gang.h"
#include "gpuslice/statedb.h"
#include "json.h"
#include "procs.h"
#include "util.h"

enum placement { BINPACK, SPREAD };

/* The node's admission policy: the policy table's one row (accountant.py). */
struct policy {
    double overcommit;   /* 1.0-16.0 */
    enum placement placement;
    int64_t cores_limit; /* 1-100 */
};

struct gs_acct {
    sqlite3 *db;
    char *path;           /* for messages: one line (gs_quote) */
    struct policy policy; /* read in each admission's transaction */
    /* Why the last admission was refused, for its `refuse` event: the
     * class (a static string) and the card the line names ("" if none). */
    const char *refused_class, *refused_device; /* the device: the request's */
    char *refused_card;
};

struct card {
    int64_t index;
    char *uuid;
    int64_t total_mib;
    int mig, healthy;
    char *reason; /* health_reason: why it is out of service, "" if none recorded */
    int numa;     /* numa_node, -1 unknown (for a gang's placement) */
};

struct usage {
    int64_t reserved_mib, cores;
    int exclusive;
    size_t count;
    char *holders; /* the holders' ids[:12], sorted, ", "-joined */
};

#define RES_COLS \
    "container_id, device, card_uuid, memory_mib, cores, exclusive, pid, pid_start, runtime, " \
    "created, priority, name, slot"

static int sql_fail(struct gs_acct *a)
{
    return gs_fail("%s: %s", a->path, sqlite3_errmsg(a->db));
}

static int exec(struct gs_acct *a, const char *sql)
{
    return sqlite3_exec(a->db, sql, NULL, NULL, NULL) == SQLITE_OK ? GS_OK : sql_fail(a);
}

static sqlite3_stmt *prepare(struct gs_acct *a, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(a->db, sql, -1, &st, NULL) != SQLITE_OK) {
        sql_fail(a);
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

/* Step a statement that returns no row. */
static int run(struct gs_acct *a, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    int r = rc == SQLITE_DONE || rc == SQLITE_ROW ? GS_OK : sql_fail(a);
    sqlite3_finalize(st);
    return r;
}

static char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return gs_xstrdup(t ? (const char *)t : "");
}

static void text(sqlite3_stmt *st, int i, const char *s)
{
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
}

/* ------------------------------------------------------------- open */

/* What SQLite says of a file it cannot use, and what it is for. */
static int unusable(struct gs_acct *a)
{
    return gs_fail("%s: not a usable gpuslice database: %s", a->path, sqlite3_errmsg(a->db));
}

static int pragma(struct gs_acct *a, const char *sql)
{
    return sqlite3_exec(a->db, sql, NULL, NULL, NULL) == SQLITE_OK ? GS_OK : unusable(a);
}

/* Run a query to its first row; *keep holds the statement (to finalize). */
static int first_row(struct gs_acct *a, const char *sql, int *has_row, sqlite3_stmt **keep)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(a->db, sql, -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return unusable(a);
    }
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        int r = unusable(a);
        sqlite3_finalize(st);
        return r;
    }
    *has_row = rc == SQLITE_ROW;
    *keep = st;
    return GS_OK;
}

/* One integer PRAGMA (application_id, user_version) into *out. */
static int pragma_int(struct gs_acct *a, const char *sql, long long *out)
{
    sqlite3_stmt *st = NULL;
    int row = 0;
    if (first_row(a, sql, &row, &st) != GS_OK)
        return GS_ERROR;
    *out = row ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return GS_OK;
}

/* The schema is ocihook/accountant.py's to make and migrate: this side
 * only checks that the file names itself gpuslice's (statedb.h) at the
 * version it was built for. A file of gpuslice 1 or 2 (no application_id; a meta table) is
 * older; an empty one was never made by `gpuslice cdi generate`. */
static int schema_check(struct gs_acct *a)
{
    const char *path = a->path;
    long long app_id, version, tables, meta;
    if (pragma_int(a, "PRAGMA application_id", &app_id) != GS_OK ||
        pragma_int(a, "PRAGMA user_version", &version) != GS_OK)
        return GS_ERROR;
    if (app_id != GPUSLICE_DB_APPLICATION_ID) {
        if (app_id != 0)
            return gs_fail("%s: application_id %#010llx is not gpuslice's (%#010x): another "
                           "program's SQLite file; refusing to touch it (check the "
                           "configuration key database)", path, app_id,
                           GPUSLICE_DB_APPLICATION_ID);
        if (pragma_int(a, "SELECT count(*) FROM sqlite_master", &tables) != GS_OK ||
            pragma_int(a, "SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                          "name='meta'", &meta) != GS_OK)
            return GS_ERROR;
        if (version == 0 && tables == 0)
            return gs_fail("%s: is empty, not a gpuslice database yet; run `gpuslice cdi "
                           "generate` (it records the cards)", path);
        if (version == 0 && meta)
            return gs_fail("%s: made by an older gpuslice (schema version 1 or 2); run "
                           "`gpuslice cdi generate` with this gpuslice (it upgrades the "
                           "database in place, rows kept)", path);
        return gs_fail("%s: holds tables that are not gpuslice's; refusing to touch it (check "
                       "the configuration key database)", path);
    }
    if (version > GPUSLICE_DB_SCHEMA_VERSION)
        return gs_fail("%s: schema version %lld is newer than this gpuslice knows (%d); "
                       "upgrade gpuslice", path, version, GPUSLICE_DB_SCHEMA_VERSION);
    if (version < GPUSLICE_DB_SCHEMA_VERSION)
        return gs_fail("%s: schema version %lld is older than this gpuslice knows (%d); run "
                       "`gpuslice cdi generate` with this gpuslice", path, version,
                       GPUSLICE_DB_SCHEMA_VERSION);
    return GS_OK;
}

int gs_acct_open(const char *path, struct gs_acct **out)
{
    struct stat st;
    char *shown = gs_quoted(path, strlen(path), GS_AS_PATH);
    int rc = GS_OK;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            rc = gs_fail("%s: no gpuslice database; run `gpuslice cdi generate` (it records "
                         "the cards)", shown);
        else
            rc = gs_fail("%s: cannot open the accountant's database: %s", shown,
                         strerror(errno));
        free(shown);
        return rc;
    }
    sqlite3 *db = NULL;
    /* READWRITE without CREATE: a database is made by `gpuslice cdi generate`. */
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        int r = gs_fail("%s: cannot open the accountant's database: %s", shown,
                        db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        free(shown);
        return r;
    }
    struct gs_acct *a = gs_xmalloc(sizeof *a);
    a->db = db;
    a->path = shown;
    a->refused_class = a->refused_device = NULL;
    a->refused_card = NULL;
    sqlite3_busy_timeout(db, GS_BUSY_TIMEOUT_MS);
    /* No checkpoint when this, often the last, connection closes: it costs two
     * fdatasyncs (WAL and database) on every container start and stop, for
     * nothing synchronous=NORMAL needs; the WAL is checkpointed as it grows
     * (wal_autocheckpoint) and by the next writer. */
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    /* The schema before journal_mode=WAL, which writes to the file: a file
     * that is not ours is left as it was. */
    if (pragma(a, "PRAGMA busy_timeout=30000; PRAGMA foreign_keys=ON; "
                  "PRAGMA synchronous=NORMAL") != GS_OK ||
        schema_check(a) != GS_OK || pragma(a, "PRAGMA journal_mode=WAL") != GS_OK) {
        gs_acct_close(a);
        return GS_ERROR;
    }
    *out = a;
    return GS_OK;
}

struct sqlite3 *gs_acct_db(struct gs_acct *a)
{
    return a->db;
}

const char *gs_acct_path(const struct gs_acct *a)
{
    return a->path;
}

void gs_acct_close(struct gs_acct *a)
{
    if (!a)
        return;
    sqlite3_close(a->db);
    free(a->path);
    free(a->refused_card);
    free(a);
}

/* ---------------------------------------------------------- helpers */

static int begin(struct gs_acct *a)
{
    return exec(a, "BEGIN IMMEDIATE");
}

static void rollback(struct gs_acct *a)
{
    if (!sqlite3_get_autocommit(a->db))
        sqlite3_exec(a->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Commit, or roll back and keep the message of code. */
static int finish(struct gs_acct *a, int code)
{
    if (code == GS_OK && exec(a, "COMMIT") == GS_OK)
        return GS_OK;
    char *why = gs_message_take();
    rollback(a);
    if (code == GS_NO)
        gs_refuse("%s", why);
    else
        gs_fail("%s", why);
    free(why);
    return code == GS_NO ? GS_NO : GS_ERROR;
}

/* What one row owns; the row itself belongs to its list. */
static void reservation_free(struct gs_reservation *r)
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
        reservation_free(&list->v[i]);
    free(list->v);
    list->v = NULL;
    list->n = list->cap = 0;
}

static struct gs_reservation *push(struct gs_reservations *list)
{
    if (list->n == list->cap) {
        list->cap = list->cap ? list->cap * 2 : 4;
        list->v = gs_xrealloc(list->v, list->cap * sizeof *list->v);
    }
    struct gs_reservation *r = &list->v[list->n++];
    memset(r, 0, sizeof *r);
    r->card_index = -1;
    return r;
}

static void row_reservation(sqlite3_stmt *st, struct gs_reservation *r)
{
    r->container_id = col_text(st, 0);
    r->device = col_text(st, 1);
    r->card_uuid = col_text(st, 2);
    r->memory_mib = sqlite3_column_int64(st, 3);
    r->cores = sqlite3_column_int64(st, 4);
    r->exclusive = sqlite3_column_int64(st, 5) != 0;
    r->has_pid = sqlite3_column_type(st, 6) != SQLITE_NULL;
    r->pid = sqlite3_column_int64(st, 6);
    r->has_pid_start = sqlite3_column_type(st, 7) != SQLITE_NULL;
    r->pid_start = sqlite3_column_int64(st, 7);
    r->runtime = col_text(st, 8);
    r->created = sqlite3_column_double(st, 9);
    r->priority = col_text(st, 10);
    r->name = col_text(st, 11);
    r->slot = sqlite3_column_int64(st, 12);
}

/* Every row of a SELECT RES_COLS statement (already bound) into list. */
static int rows(struct gs_acct *a, sqlite3_stmt *st, struct gs_reservations *list)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        row_reservation(st, push(list));
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? GS_OK : sql_fail(a);
}

/* INSERT INTO events; detail is a JSON object, its keys in alphabetical
 * order (as ocihook/accountant.py writes its own). */
static int event(struct gs_acct *a, const char *kind, const char *cid, const char *card,
                 const char *detail)
{
    sqlite3_stmt *st = prepare(a, "INSERT INTO events(at, kind, container_id, card_uuid, "
                                  "detail) VALUES (?, ?, ?, ?, ?)");
    if (!st)
        return GS_ERROR;
    sqlite3_bind_double(st, 1, gs_now());
    text(st, 2, kind);
    text(st, 3, cid);
    text(st, 4, card);
    text(st, 5, detail);
    return run(a, st);
}

/* {"device": ..., "memory_mib": ...[, "pid": ...]}: release, undo, reclaim. */
static int dropped_event(struct gs_acct *a, const char *kind, const struct gs_reservation *r,
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
    int rc = event(a, kind, r->container_id, r->card_uuid, d.s);
    gs_str_free(&d);
    return rc;
}

/* --------------------------------------------------------- reclaim */

static int reclaim_dead(struct gs_acct *a, struct gs_reservations *dead)
{
    struct gs_reservations all = {0};
    sqlite3_stmt *st = prepare(a, "SELECT " RES_COLS " FROM reservations");
    int rc = st ? rows(a, st, &all) : GS_ERROR;
    for (size_t i = 0; rc == GS_OK && i < all.n; i++) {
        struct gs_reservation *r = &all.v[i];
        if (gs_alive(r->has_pid ? &r->pid : NULL, r->has_pid_start ? &r->pid_start : NULL))
            continue;
        st = prepare(a, "DELETE FROM reservations WHERE container_id=? AND device=? AND "
                        "card_uuid=?");
        if (!st) {
            rc = GS_ERROR;
            break;
        }
        text(st, 1, r->container_id);
        text(st, 2, r->device);
        text(st, 3, r->card_uuid);
        rc = run(a, st);
        if (rc == GS_OK)
            rc = dropped_event(a, "reclaim", r, 1);
        if (rc == GS_OK) { /* hand the row over */
            *push(dead) = *r;
            memset(r, 0, sizeof *r);
        }
    }
    gs_reservations_free(&all);
    return rc;
}

int gs_acct_gc(struct gs_acct *a, struct gs_reservations *out)
{
    if (begin(a) != GS_OK)
        return GS_ERROR;
    return finish(a, reclaim_dead(a, out));
}

/* -------------------------------------------------------- release */

int gs_acct_release(struct gs_acct *a, const char *container_id, const char *why,
                    struct gs_reservations *out)
{
    if (begin(a) != GS_OK)
        return GS_ERROR;
    size_t first = out->n;
    sqlite3_stmt *st = prepare(a, "SELECT " RES_COLS " FROM reservations WHERE container_id=?");
    int rc = GS_ERROR;
    if (st) {
        text(st, 1, container_id);
        rc = rows(a, st, out);
    }
    if (rc == GS_OK) {
        st = prepare(a, "DELETE FROM reservations WHERE container_id=?");
        if (st) {
            text(st, 1, container_id);
            rc = run(a, st);
        } else {
            rc = GS_ERROR;
        }
    }
    for (size_t i = first; rc == GS_OK && i < out->n; i++)
        rc = dropped_event(a, why, &out->v[i], 0);
    return finish(a, rc);
}

/* ---------------------------------------------------------- admit */

static void free_cards(struct card *cards, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(cards[i].uuid);
        free(cards[i].reason);
    }
    free(cards);
}

static int load_cards(struct gs_acct *a, struct card **out, size_t *n)
{
    sqlite3_stmt *st = prepare(a, "SELECT idx, uuid, total_mib, mig, healthy, health_reason, "
                                  "numa_node FROM cards ORDER BY idx");
    if (!st)
        return GS_ERROR;
    struct card *v = NULL;
    size_t count = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            v = gs_xrealloc(v, cap * sizeof *v);
        }
        struct card *c = &v[count++];
        c->index = sqlite3_column_int64(st, 0);
        c->uuid = col_text(st, 1);
        c->total_mib = sqlite3_column_int64(st, 2);
        c->mig = sqlite3_column_int64(st, 3) != 0;
        c->healthy = sqlite3_column_int64(st, 4) != 0;
        c->reason = col_text(st, 5);
        c->numa = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1
                                                            : (int)sqlite3_column_int64(st, 6);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free_cards(v, count);
        return sql_fail(a);
    }
    *out = v;
    *n = count;
    return GS_OK;
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static int card_usage(struct gs_acct *a, const struct card *c, struct usage *u)
{
    memset(u, 0, sizeof *u);
    sqlite3_stmt *st = prepare(a, "SELECT container_id, memory_mib, cores, exclusive FROM "
                                  "reservations WHERE card_uuid=?");
    if (!st)
        return GS_ERROR;
    text(st, 1, c->uuid);
    char **ids = NULL;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (u->count == cap) {
            cap = cap ? cap * 2 : 8;
            ids = gs_xrealloc(ids, cap * sizeof *ids);
        }
        const char *id = (const char *)sqlite3_column_text(st, 0);
        id = id ? id : "";
        ids[u->count++] = gs_xstrndup(id, gs_utf8_prefix(id, 12));
        u->reserved_mib += sqlite3_column_int64(st, 1);
        u->cores += sqlite3_column_int64(st, 2);
        u->exclusive |= sqlite3_column_int64(st, 3) != 0;
    }
    sqlite3_finalize(st);
    /* ", ".join(sorted({r.container_id[:12] ...})); UTF-8 sorts as code points */
    if (u->count)
        qsort(ids, u->count, sizeof *ids, cmp_str);
    struct gs_str h = {0};
    for (size_t i = 0; i < u->count; i++) {
        if (i > 0 && strcmp(ids[i], ids[i - 1]) == 0)
            continue;
        if (h.len)
            gs_str_add(&h, ", ");
        gs_str_add(&h, ids[i]);
    }
    for (size_t i = 0; i < u->count; i++)
        free(ids[i]);
    free(ids);
    u->holders = gs_str_take(&h);
    return rc == SQLITE_DONE ? GS_OK : sql_fail(a);
}

static int64_t capacity_mib(const struct gs_acct *a, const struct card *c)
{
    /* toward 0, as accountant.Policy.capacity_mib rounds */
    return (int64_t)((double)c->total_mib * a->policy.overcommit);
}

static int64_t free_mib(const struct gs_acct *a, const struct card *c, const struct usage *u)
{
    if (u->exclusive)
        return 0;
    int64_t f = capacity_mib(a, c) - u->reserved_mib;
    return f > 0 ? f : 0;
}

/* "card N (UUID) is out of service (reason); ..." */
static void out_of_service(struct gs_str *why, const struct card *c)
{
    long long idx = (long long)c->index;
    gs_str_addf(why, "card %lld (%s) is out of service (%s); `gpuslice card enable %lld` "
                "returns it", idx, c->uuid, c->reason[0] ? c->reason : "no reason recorded",
                idx);
}

/* The classes of a refusal, for its `refuse` event (docs/architecture.md). */
#define R_UNHEALTHY "unhealthy"
#define R_HELD "held"        /* held whole by another, or slices stand in the way */
#define R_MIG "mig"
#define R_FULL "full"        /* not enough memory free */
#define R_COMPUTE "compute"  /* cores_limit reached */
#define R_UNKNOWN "unknown-card"

/* 0 if req fits on c, else 1, the one-line reason (naming what to do) and,
 * in *cls, its class (R_*). */
static int why_not(const struct gs_acct *a, const struct gs_request *req, const struct card *c,
                   const struct usage *u, struct gs_str *why, const char **cls)
{
    const char *dev = req->device;
    long long idx = (long long)c->index;
    if (!c->healthy) {
        *cls = R_UNHEALTHY;
        gs_str_addf(why, "%s: ", dev);
        out_of_service(why, c);
        return 1;
    }
    *cls = R_HELD;
    if (u->exclusive) {
        gs_str_addf(why, "%s: card %lld (%s) is held whole by %s; stop it, or ask for another "
                    "card", dev, idx, c->uuid, u->holders);
        return 1;
    }
    if (req->exclusive) {
        if (u->count == 0)
            return 0;
        gs_str_addf(why, "%s: card %lld (%s) cannot be held whole: %zu slice(s) hold %lld MiB "
                    "(%s); stop them first", dev, idx, c->uuid, u->count,
                    (long long)u->reserved_mib, u->holders);
        return 1;
    }
    *cls = R_MIG;
    if (c->mig) {
        gs_str_addf(why, "%s: card %lld (%s) is in MIG mode; it is offered whole only, ask for "
                    "the whole card", dev, idx, c->uuid);
        return 1;
    }
    *cls = R_FULL;
    int64_t free = free_mib(a, c, u);
    if (req->memory_mib > free) {
        gs_str_addf(why, "%s: card %lld (%s) has %lld MiB free of %lld MiB, %lld MiB asked; stop "
                    "a container on it or ask for less", dev, idx, c->uuid, (long long)free,
                    (long long)capacity_mib(a, c), (long long)req->memory_mib);
        return 1;
    }
    *cls = R_COMPUTE;
    if (req->cores && u->cores + req->cores > a->policy.cores_limit) {
        gs_str_addf(why, "%s: card %lld (%s) has %lld%% of its compute left, %lld%% asked; stop "
                    "a capped container on it or ask for less", dev, idx, c->uuid,
                    (long long)(a->policy.cores_limit - u->cores), (long long)req->cores);
        return 1;
    }
    return 0;
}

static int card_index_of(struct gs_acct *a, const char *uuid, int64_t *out)
{
    sqlite3_stmt *st = prepare(a, "SELECT idx FROM cards WHERE uuid=?");
    if (!st)
        return GS_ERROR;
    text(st, 1, uuid);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? GS_OK : sql_fail(a);
}

/* The idempotent answer: what this container already holds for req. */
static int existing(struct gs_acct *a, const struct gs_request *req,
                    struct gs_reservations *out, int *found)
{
    int one = req->n_cards == 1 && req->slices <= 1;
    sqlite3_stmt *st = prepare(a, one
        ? "SELECT " RES_COLS " FROM reservations WHERE container_id=? AND device=? AND card_uuid=?"
        : "SELECT " RES_COLS " FROM reservations WHERE container_id=? AND device=? ORDER BY slot");
    if (!st)
        return GS_ERROR;
    text(st, 1, req->container_id);
    text(st, 2, req->device);
    if (one)
        text(st, 3, req->card_uuids[0]);
    size_t from = out->n;
    int rc;
    /* A gang's rows, all of them (one transaction wrote them); else the first. */
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        row_reservation(st, push(out));
        if (req->slices <= 1)
            break;
    }
    sqlite3_finalize(st);
    *found = out->n > from;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return sql_fail(a);
    for (size_t i = from; i < out->n; i++)
        if (card_index_of(a, out->v[i].card_uuid, &out->v[i].card_index) != GS_OK)
            return GS_ERROR;
    return GS_OK;
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

static int no_card(const struct gs_request *req)
{
    if (req->n_cards == 0)
        return gs_refuse("%s: the accountant knows no card; run `gpuslice cdi generate`",
                         req->device);
    struct gs_str list = {0};
    for (size_t i = 0; i < req->n_cards; i++) {
        if (i)
            gs_str_add(&list, ", ");
        gs_str_add(&list, req->card_uuids[i]);
    }
    int r = gs_refuse("%s: card %s is not known to the accountant; run `gpuslice cdi generate` "
                      "after a driver or card change", req->device, list.s);
    gs_str_free(&list);
    return r;
}

static int insert(struct gs_acct *a, const struct gs_request *req, const struct card *c,
                  int64_t slot, struct gs_reservations *out)
{
    int64_t memory = req->exclusive ? c->total_mib : req->memory_mib;
    double now = gs_now();
    sqlite3_stmt *st = prepare(a, "INSERT INTO reservations(container_id, device, card_uuid, "
                                  "memory_mib, cores, exclusive, pid, pid_start, runtime, "
                                  "created, priority, name, slot) VALUES "
                                  "(?,?,?,?,?,?,?,?,?,?,?,?,?)");
    if (!st)
        return GS_ERROR;
    text(st, 1, req->container_id);
    text(st, 2, req->device);
    text(st, 3, c->uuid);
    sqlite3_bind_int64(st, 4, memory);
    sqlite3_bind_int64(st, 5, req->cores);
    sqlite3_bind_int64(st, 6, req->exclusive ? 1 : 0);
    if (req->pid)
        sqlite3_bind_int64(st, 7, *req->pid);
    if (req->pid_start)
        sqlite3_bind_int64(st, 8, *req->pid_start);
    text(st, 9, req->runtime ? req->runtime : "");
    sqlite3_bind_double(st, 10, now);
    text(st, 11, req->priority);
    text(st, 12, req->name ? req->name : "");
    sqlite3_bind_int64(st, 13, slot);
    if (run(a, st) != GS_OK)
        return GS_ERROR;
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
    int rc = event(a, "admit", req->container_id, c->uuid, d.s);
    gs_str_free(&d);
    if (rc != GS_OK)
        return rc;
    struct gs_reservation *r = push(out);
    r->container_id = gs_xstrdup(req->container_id);
    r->device = gs_xstrdup(req->device);
    r->card_uuid = gs_xstrdup(c->uuid);
    r->runtime = gs_xstrdup(req->runtime ? req->runtime : "");
    r->priority = gs_xstrdup(req->priority);
    r->name = gs_xstrdup(req->name ? req->name : "");
    r->memory_mib = memory;
    r->cores = req->cores;
    r->exclusive = req->exclusive;
    r->has_pid = req->pid != NULL;
    r->pid = req->pid ? *req->pid : 0;
    r->has_pid_start = req->pid_start != NULL;
    r->pid_start = req->pid_start ? *req->pid_start : 0;
    r->created = now;
    r->card_index = c->index;
    r->slot = slot;
    return GS_OK;
}

/* Keep what the `refuse` event of this admission will say. */
static void note_refusal(struct gs_acct *a, const struct gs_request *req, const char *cls,
                         const char *card)
{
    a->refused_class = cls;
    a->refused_device = req->device;
    free(a->refused_card);
    a->refused_card = gs_xstrdup(card);
}

/* ----------------------------------------------------------- gangs */

/* How near each pair of candidates is (gang.h), from the cards'
 * NUMA nodes and the links `gpuslice cdi generate` recorded. */
static int gang_links(struct gs_acct *a, struct card **cand, size_t n, unsigned char *near,
                      unsigned *nvlinks)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            near[i * n + j] = (unsigned char)gs_gang_nearness(NULL, 0, cand[i]->numa,
                                                              cand[j]->numa);
            nvlinks[i * n + j] = 0;
        }
    sqlite3_stmt *st = prepare(a, "SELECT card_a, card_b, pcie, nvlinks FROM card_links");
    if (!st)
        return GS_ERROR;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *ua = (const char *)sqlite3_column_text(st, 0);
        const char *ub = (const char *)sqlite3_column_text(st, 1);
        const char *pcie = (const char *)sqlite3_column_text(st, 2);
        int64_t links = sqlite3_column_int64(st, 3);
        size_t i = n, j = n;
        for (size_t k = 0; k < n && ua && ub; k++) {
            if (strcmp(cand[k]->uuid, ua) == 0)
                i = k;
            if (strcmp(cand[k]->uuid, ub) == 0)
                j = k;
        }
        if (i == n || j == n || i == j)
            continue;
        unsigned nv = links > 0 ? (unsigned)(links > 1000 ? 1000 : links) : 0;
        unsigned char t = (unsigned char)gs_gang_nearness(pcie, nv, cand[i]->numa,
                                                           cand[j]->numa);
        near[i * n + j] = near[j * n + i] = t;
        nvlinks[i * n + j] = nvlinks[j * n + i] = nv;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? GS_OK : sql_fail(a);
}

/* "a gang of N slices of M MiB[, C%]" */
static void gang_words(struct gs_str *s, const struct gs_request *req)
{
    gs_str_addf(s, "%s: a gang of %lld slices of %lld MiB", req->device, (long long)req->slices,
                (long long)req->memory_mib);
    if (req->cores)
        gs_str_addf(s, ", %lld%%", (long long)req->cores);
}

/* Too few cards to hold the gang, ever (bad input: exit 2), or now (a
 * refusal naming the likeliest card that keeps it out, and its class). */
static int gang_refusal(struct gs_acct *a, const struct gs_request *req, struct card **cand,
                        struct usage *use, size_t n, const struct gs_gang_card *gc)
{
    struct gs_str why = {0}, able = {0}, room = {0};
    size_t nable = 0, nroom = 0, likeliest = n;
    for (size_t i = 0; i < n; i++) {
        if (!cand[i]->mig && capacity_mib(a, cand[i]) >= req->memory_mib)
            gs_str_addf(&able, "%s%lld", nable++ ? ", " : "", (long long)cand[i]->index);
        if (gc[i].fits)
            gs_str_addf(&room, "%s%lld", nroom++ ? ", " : "", (long long)cand[i]->index);
        else if (cand[i]->healthy && !cand[i]->mig &&
                 (likeliest == n || free_mib(a, cand[i], &use[i]) >
                                        free_mib(a, cand[likeliest], &use[likeliest])))
            likeliest = i;
    }
    gang_words(&why, req);
    int rc;
    if (nable < (size_t)req->slices) {
        gs_str_addf(&why, " needs %lld cards that can hold one, and this node has %zu%s%s%s; "
                    "ask for at most %zu slices, or run `gpuslice cdi generate` after adding "
                    "cards", (long long)req->slices, nable, nable ? " (card " : "",
                    nable ? able.s : "", nable ? ")" : "", nable);
        rc = gs_fail("%s", why.s);
    } else {
        gs_str_addf(&why, " needs %lld cards with room for one each, and %zu %s room now%s%s%s",
                    (long long)req->slices, nroom, nroom == 1 ? "has" : "have",
                    nroom ? " (card " : "", nroom ? room.s : "", nroom ? ")" : "");
        const char *cls = R_UNHEALTHY, *named = "";
        if (likeliest < n) {
            struct gs_str one = {0};
            why_not(a, req, cand[likeliest], &use[likeliest], &one, &cls);
            size_t skip = strlen(req->device) + 2; /* why_not's "<device>: " */
            gs_str_addf(&why, "; the likeliest: %s", one.len > skip ? one.s + skip : one.s);
            gs_str_free(&one);
            named = cand[likeliest]->uuid;
        } else {
            gs_str_add(&why, "; the others are out of service or in MIG mode: `gpuslice "
                             "status` says which; stop containers on the cards or ask for "
                             "fewer slices");
        }
        note_refusal(a, req, cls, named);
        rc = gs_refuse("%s", why.s);
    }
    gs_str_free(&why);
    gs_str_free(&able);
    gs_str_free(&room);
    return rc;
}

/* One slice on each of req->slices cards, chosen by gang.h's rules, in this
 * transaction: all rows or none (the caller rolls back on any failure). */
static int admit_gang(struct gs_acct *a, const struct gs_request *req, struct card **cand,
                      struct usage *use, size_t n, struct gs_reservations *out)
{
    struct gs_gang_card *gc = gs_xmalloc(n * sizeof *gc);
    unsigned char *near = gs_xmalloc(n * n);
    unsigned *nvlinks = gs_xmalloc(n * n * sizeof *nvlinks);
    size_t *pick = gs_xmalloc((size_t)req->slices * sizeof *pick);
    for (size_t i = 0; i < n; i++) {
        struct gs_str scratch = {0};
        const char *cls;
        gc[i].index = cand[i]->index;
        gc[i].fits = !why_not(a, req, cand[i], &use[i], &scratch, &cls);
        gc[i].free_after_mib = free_mib(a, cand[i], &use[i]) - req->memory_mib;
        gs_str_free(&scratch);
    }
    int rc = gang_links(a, cand, n, near, nvlinks);
    if (rc == GS_OK) {
        if (gs_gang_pick(gc, n, near, nvlinks, (size_t)req->slices,
                         a->policy.placement == SPREAD, pick) != 0)
            rc = gang_refusal(a, req, cand, use, n, gc);
        for (size_t k = 0; rc == GS_OK && k < (size_t)req->slices; k++)
            rc = insert(a, req, cand[pick[k]], (int64_t)k, out);
    }
    free(pick);
    free(nvlinks);
    free(near);
    free(gc);
    return rc;
}

static int admit_locked(struct gs_acct *a, const struct gs_request *req,
                        struct gs_reservations *out)
{
    if (!req->container_id || !req->container_id[0])
        return gs_refuse("a container id is needed");
    int found;
    int rc = existing(a, req, out, &found);
    if (rc != GS_OK || found)
        return rc; /* the hook ran twice: same answer */
    struct card *cards = NULL;
    size_t ncards = 0, ncand = 0;
    if (load_cards(a, &cards, &ncards) != GS_OK)
        return GS_ERROR;
    /* Candidates keep the cards' order (by index); usage per candidate. */
    struct card **cand = gs_xmalloc((ncards ? ncards : 1) * sizeof *cand);
    struct usage *use = gs_xmalloc((ncards ? ncards : 1) * sizeof *use);
    for (size_t i = 0; i < ncards; i++)
        if (wanted(req, cards[i].uuid))
            cand[ncand++] = &cards[i];
    size_t nuse = 0;
    struct gs_str why = {0};
    if (ncand == 0) {
        note_refusal(a, req, R_UNKNOWN, "");
        rc = no_card(req);
        goto out;
    }
    for (; nuse < ncand; nuse++)
        if (card_usage(a, cand[nuse], &use[nuse]) != GS_OK) {
            free(use[nuse].holders);
            rc = GS_ERROR;
            goto out;
        }
    if (req->slices > 1) {
        rc = admit_gang(a, req, cand, use, ncand, out);
        goto out;
    }
    /* binpack: the fullest card that fits; spread: the emptiest. Ties:
     * lowest index; equal keys: the first. A card out of service is
     * skipped; when none fits, the line names the healthy card with the
     * most free, or what keeps the cards out of service if none is healthy. */
    size_t pick = ncand, best = ncand, sick = 0;
    for (size_t i = 0; i < ncand; i++) {
        if (!cand[i]->healthy) {
            sick++;
            continue;
        }
        int64_t f = free_mib(a, cand[i], &use[i]);
        if (best == ncand) {
            best = i;
        } else {
            int64_t bf = free_mib(a, cand[best], &use[best]);
            if (f > bf || (f == bf && cand[i]->index < cand[best]->index))
                best = i;
        }
        struct gs_str scratch = {0};
        const char *cls;
        int no = why_not(a, req, cand[i], &use[i], &scratch, &cls);
        gs_str_free(&scratch);
        if (no)
            continue;
        if (pick == ncand) {
            pick = i;
            continue;
        }
        int64_t pf = free_mib(a, cand[pick], &use[pick]);
        if (a->policy.placement == SPREAD
                ? (f > pf || (f == pf && cand[i]->index < cand[pick]->index))
                : (f < pf || (f == pf && cand[i]->index < cand[pick]->index)))
            pick = i;
    }
    if (pick == ncand) {
        const char *cls = R_UNHEALTHY, *named = "";
        if (best < ncand) {
            if (ncand > 1)
                gs_str_add(&why, "no card has room; the likeliest: ");
            size_t at = why.len;
            if (!why_not(a, req, cand[best], &use[best], &why, &cls) || why.len == at)
                gs_str_add(&why, "does not fit");
            named = cand[best]->uuid;
            for (size_t i = 0, k = 0; i < ncand; i++)
                if (!cand[i]->healthy)
                    gs_str_addf(&why, "%s%lld", k++ ? ", " : "; out of service: card ",
                                (long long)cand[i]->index);
        } else if (ncand == 1) {
            why_not(a, req, cand[0], &use[0], &why, &cls);
            named = cand[0]->uuid;
        } else {
            gs_str_addf(&why, "%s: no card is in service: ", req->device);
            for (size_t i = 0; i < ncand; i++) {
                if (i)
                    gs_str_add(&why, "; ");
                out_of_service(&why, cand[i]);
            }
        }
        note_refusal(a, req, cls, named);
        rc = gs_refuse("%s", why.s);
        goto out;
    }
    rc = insert(a, req, cand[pick], 0, out);
out:
    gs_str_free(&why);
    for (size_t i = 0; i < nuse; i++)
        free(use[i].holders);
    free(use);
    free(cand);
    free_cards(cards, ncards);
    return rc;
}

/* The policy row, checked against the table's rules once more (a CHECK
 * can be switched off by whoever writes the file). */
static int load_policy(struct gs_acct *a)
{
    static const char fix[] = "run `gpuslice config apply` (it records the configuration's)";
    sqlite3_stmt *st = prepare(a, "SELECT placement, memory_overcommit, cores_limit FROM "
                                  "policy WHERE id=1");
    if (!st)
        return GS_ERROR;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return sql_fail(a);
        return gs_fail("%s: no admission policy recorded; run `gpuslice cdi generate` or "
                       "`gpuslice config apply` (they record the configuration's)", a->path);
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
        a->policy = (struct policy){overcommit, strcmp(placement, "spread") == 0 ? SPREAD
                                                                                 : BINPACK,
                                    cores_limit};
    sqlite3_finalize(st);
    return r;
}

/* Whether the container holds anything yet (another device's hook may have
 * admitted it already). */
static int holds_any(struct gs_acct *a, const char *cid, int *any)
{
    sqlite3_stmt *st = prepare(a, "SELECT 1 FROM reservations WHERE container_id=? LIMIT 1");
    if (!st)
        return GS_ERROR;
    text(st, 1, cid);
    int rc = sqlite3_step(st);
    *any = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? GS_OK : sql_fail(a);
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
    (void)event(a, "refuse", cid, a->refused_card ? a->refused_card : "", d.s);
    gs_str_free(&d);
    gs_refuse("%s", why);
    free(why);
}

int gs_acct_admit(struct gs_acct *a, const struct gs_request *reqs, size_t n,
                  struct gs_reservations *out, struct gs_reservations *reclaimed, int *first)
{
    a->refused_class = NULL;
    if (begin(a) != GS_OK)
        return GS_ERROR;
    size_t held = out->n, dead = reclaimed->n;
    int any = 0;
    int rc = load_policy(a);
    if (rc == GS_OK)
        rc = reclaim_dead(a, reclaimed);
    if (rc == GS_OK && n > 0)
        rc = holds_any(a, reqs[0].container_id, &any);
    for (size_t i = 0; rc == GS_OK && i < n; i++)
        rc = admit_locked(a, &reqs[i], out);
    rc = finish(a, rc);
    if (rc == GS_NO && a->refused_class)
        refusal_event(a, reqs[0].container_id);
    if (rc != GS_OK) { /* nothing was written: nothing is held, nothing reclaimed */
        for (size_t i = held; i < out->n; i++)
            reservation_free(&out->v[i]);
        out->n = held;
        for (size_t i = dead; i < reclaimed->n; i++)
            reservation_free(&reclaimed->v[i]);
        reclaimed->n = dead;
    }
    *first = !any;
    return rc;
}

/* --------------------------------------------------------- resize */

/* The one row a resize changes: the container must hold exactly one, for
 * this device, a slice (the region's caps are one per CUDA ordinal, and the
 * spec's environment gives every ordinal of a container the same one). */
static int resized_row(struct gs_acct *a, const struct gs_resize *req,
                       struct gs_reservations *held)
{
    sqlite3_stmt *st = prepare(a, "SELECT " RES_COLS " FROM reservations WHERE container_id=? "
                                  "ORDER BY device");
    if (!st)
        return GS_ERROR;
    text(st, 1, req->container_id);
    if (rows(a, st, held) != GS_OK)
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
    if (held->n > 1) {
        struct gs_str list = {0};
        for (size_t i = 0; i < held->n; i++)
            gs_str_addf(&list, "%s%s", i ? ", " : "", held->v[i].device);
        int r = gs_fail("container %.*s holds %zu devices (%s): its processes see one cap for "
                        "all of them, so only a container of one slice can be resized", n, cid,
                        held->n, list.s);
        gs_str_free(&list);
        return r;
    }
    const struct gs_reservation *r = &held->v[0];
    if (strcmp(r->device, req->device) != 0)
        return gs_fail("container %.*s holds device %s, not %s; name that one", n, cid,
                       r->device, req->device);
    if (r->exclusive)
        return gs_fail("container %.*s holds %s as a whole card, which has no slice to resize",
                       n, cid, r->device);
    return GS_OK;
}

static int resize_locked(struct gs_acct *a, const struct gs_resize *req,
                         unsigned long long used_bytes, struct gs_reservations *before,
                         struct gs_reservations *after)
{
    if (load_policy(a) != GS_OK || resized_row(a, req, before) != GS_OK)
        return GS_ERROR;
    const struct gs_reservation *old = &before->v[0];
    int64_t mem = req->memory_mib ? *req->memory_mib : old->memory_mib;
    int64_t cores = req->cores ? *req->cores : old->cores;
    struct card *cards = NULL, *c = NULL;
    size_t ncards = 0;
    if (load_cards(a, &cards, &ncards) != GS_OK)
        return GS_ERROR;
    for (size_t i = 0; i < ncards && !c; i++)
        if (strcmp(cards[i].uuid, old->card_uuid) == 0)
            c = &cards[i];
    struct usage u = {0};
    int rc = GS_OK;
    const char *dev = req->device;
    int n = (int)gs_utf8_prefix(req->container_id, 12);
    /* The used figure is the tenant's claim: it can only stop a shrink. */
    unsigned long long used_mib = (used_bytes + (1ull << 20) - 1) >> 20;
    if (!c) {
        rc = gs_fail("%s: card %s is not known to the accountant; run `gpuslice cdi generate`",
                     dev, old->card_uuid);
        goto out;
    }
    if ((rc = card_usage(a, c, &u)) != GS_OK)
        goto out;
    long long idx = (long long)c->index;
    int64_t others_mib = u.reserved_mib - old->memory_mib, others_cores = u.cores - old->cores;
    int64_t room = capacity_mib(a, c) - others_mib;
    if ((mem > old->memory_mib || cores > old->cores) && !c->healthy) {
        struct gs_str why = {0};
        gs_str_addf(&why, "%s: ", dev);
        out_of_service(&why, c);
        rc = gs_refuse("%s; it can shrink, not grow", why.s);
        gs_str_free(&why);
    } else if (mem > old->memory_mib && mem > room) {
        rc = gs_refuse("%s: card %lld (%s) has room for %lld MiB for this slice (%lld MiB of "
                       "%lld MiB held by others), %lld MiB asked; stop a container on it or "
                       "ask for less", dev, idx, c->uuid, (long long)(room > 0 ? room : 0),
                       (long long)others_mib, (long long)capacity_mib(a, c), (long long)mem);
    } else if (cores > old->cores && cores && others_cores + cores > a->policy.cores_limit) {
        rc = gs_refuse("%s: card %lld (%s) has %lld%% of its compute left for this slice, "
                       "%lld%% asked; stop a capped container on it or ask for less", dev, idx,
                       c->uuid, (long long)(a->policy.cores_limit - others_cores),
                       (long long)cores);
    } else if ((unsigned long long)mem < used_mib) {
        rc = gs_refuse("%s: container %.*s's processes hold %llu MiB now, %lld MiB asked; free "
                       "memory in it first or ask for at least that", dev, n,
                       req->container_id, used_mib, (long long)mem);
    }
    if (rc != GS_OK)
        goto out;
    sqlite3_stmt *st = prepare(a, "UPDATE reservations SET memory_mib=?, cores=? WHERE "
                                  "container_id=? AND device=? AND card_uuid=?");
    if (!st) {
        rc = GS_ERROR;
        goto out;
    }
    sqlite3_bind_int64(st, 1, mem);
    sqlite3_bind_int64(st, 2, cores);
    text(st, 3, old->container_id);
    text(st, 4, old->device);
    text(st, 5, old->card_uuid);
    if ((rc = run(a, st)) != GS_OK)
        goto out;
    struct gs_str d = {0};
    gs_str_addf(&d, "{\"cores\": %lld, \"device\": ", (long long)cores);
    gs_json_quote(&d, old->device, strlen(old->device));
    gs_str_addf(&d, ", \"memory_mib\": %lld, \"old_cores\": %lld, \"old_memory_mib\": %lld}",
                (long long)mem, (long long)old->cores, (long long)old->memory_mib);
    rc = event(a, "resize", old->container_id, old->card_uuid, d.s);
    gs_str_free(&d);
    if (rc != GS_OK)
        goto out;
    struct gs_reservation *r = push(after);
    *r = *old;
    r->container_id = gs_xstrdup(old->container_id);
    r->device = gs_xstrdup(old->device);
    r->card_uuid = gs_xstrdup(old->card_uuid);
    r->runtime = gs_xstrdup(old->runtime);
    r->priority = gs_xstrdup(old->priority);
    r->name = gs_xstrdup(old->name);
    r->memory_mib = mem;
    r->cores = cores;
    r->card_index = c->index;
out:
    free(u.holders);
    free_cards(cards, ncards);
    return rc;
}

int gs_acct_resize(struct gs_acct *a, const struct gs_resize *req, unsigned long long used_bytes,
                   struct gs_reservations *before, struct gs_reservations *after)
{
    if (begin(a) != GS_OK)
        return GS_ERROR;
    int rc = finish(a, resize_locked(a, req, used_bytes, before, after));
    if (rc != GS_OK) {
        gs_reservations_free(before);
        gs_reservations_free(after);
    }
    return rc;
}
