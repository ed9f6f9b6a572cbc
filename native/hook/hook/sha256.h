/*
 * SHA-256 (FIPS 180-4), for one job: a claim's row is named by the hash of
 * its token (claim.h), so the secret itself is never an id that the
 * accountant, the exporter or `gpuslice status` shows. The hook links
 * SQLite only; this is small enough not to add a crypto library for.
 */
#ifndef GS_SHA256_H
#define GS_SHA256_H

#include <stddef.h>

#define GS_SHA256_HEX_LEN 64

/* The hash of data[0..n) in lowercase hex, NUL-terminated, into out. */
void gs_sha256_hex(const void *data, size_t n, char out[GS_SHA256_HEX_LEN + 1]);

#endif
