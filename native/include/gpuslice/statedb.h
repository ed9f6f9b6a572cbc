/*
 * The accountant's database (one SQLite file per host, configuration key
 * database): how it names itself. ocihook/accountant.py makes and migrates
 * it to GPUSLICE_DB_SCHEMA_VERSION; gpuslice-hook opens only a file whose
 * PRAGMA application_id and user_version are these; and the ranges of
 * its admission policy. Plain C: integer #defines only (ocihook/cheader.py
 * reads this header).
 */
#ifndef GPUSLICE_STATEDB_H
#define GPUSLICE_STATEDB_H

#define GPUSLICE_DB_APPLICATION_ID 0x47505344 /* "GPSD" */
#define GPUSLICE_DB_SCHEMA_VERSION 6

/* The admission policy's ranges, for the policy table's one row: memory
 * overcommit (a multiple of a card's total, any number in between) and the
 * cores limit (a whole percent). ocihook/policy.py reads them from here; the
 * table's CHECKs (a migration, never edited) say the same. */
#define GPUSLICE_POLICY_OVERCOMMIT_MIN 1
#define GPUSLICE_POLICY_OVERCOMMIT_MAX 16
#define GPUSLICE_POLICY_CORES_LIMIT_MIN 1
#define GPUSLICE_POLICY_CORES_LIMIT_MAX 100

#endif
