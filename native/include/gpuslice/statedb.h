/*
 * The accountant's database (one SQLite file per host, configuration key
 * database): how it names itself. ocihook/accountant.py makes and migrates
 * it to GPUSLICE_DB_SCHEMA_VERSION; gpuslice-hook opens only a file whose
 * PRAGMA application_id and user_version are these. Plain C: integer
 * #defines only (ocihook/cheader.py reads this header).
 */
#ifndef GPUSLICE_STATEDB_H
#define GPUSLICE_STATEDB_H

#define GPUSLICE_DB_APPLICATION_ID 0x47505344 /* "GPSD" */
#define GPUSLICE_DB_SCHEMA_VERSION 3

#endif
