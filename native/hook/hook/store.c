/*
 * The accountant's database, opened and checked (see store.h), and the
 * primitives every statement of the hook goes through.
 */
#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpuslice/statedb.h"
#include "json.h"
#include "util.h"

int gs_sql_fail(struct gs_acct *a)
{
    return gs_fail("%s: %s", a->path, sqlite3_errmsg(a->db));
}

static int exec(struct gs_acct *a, const char *sql)
{
    return sqlite3_exec(a->db, sql, NULL, NULL, NULL) == SQLITE_OK ? GS_OK : gs_sql_fail(a);
}

sqlite3_stmt *gs_sql_prepare(struct gs_acct *a, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(a->db, sql, -1, &st, NULL) != SQLITE_OK) {
        gs_sql_fail(a);
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

int gs_sql_run(struct gs_acct *a, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    int r = rc == SQLITE_DONE || rc == SQLITE_ROW ? GS_OK : gs_sql_fail(a);
    sqlite3_finalize(st);
    return r;
}

char *gs_sql_col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return gs_xstrdup(t ? (const char *)t : "");
}

void gs_sql_text(sqlite3_stmt *st, int i, const char *s)
{
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
}

int gs_sql_begin(struct gs_acct *a)
{
    return exec(a, "BEGIN IMMEDIATE");
}

int gs_sql_begin_read(struct gs_acct *a)
{
    return exec(a, "BEGIN");
}

static void rollback(struct gs_acct *a)
{
    if (!sqlite3_get_autocommit(a->db))
        sqlite3_exec(a->db, "ROLLBACK", NULL, NULL, NULL);
}

int gs_sql_finish(struct gs_acct *a, int code)
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

int gs_acct_open(const char *path, const char *state_dir, struct gs_acct **out)
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
    a->state_dir = state_dir;
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
