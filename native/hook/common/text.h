/*
 * Tenant text made fit for a terminal or a label (gpuslice/text.h holds the
 * rule and says why): the predicate that messages share, and the cleaning of
 * a stored name.
 */
#ifndef GS_TEXT_H
#define GS_TEXT_H

#include <stddef.h>

/* 1 if the code point may not be shown as it is (GPUSLICE_TEXT_BARRED). */
int gs_text_barred(unsigned cp);

/* s[0..n) with every barred code point, and every byte that starts no UTF-8
 * sequence, made a space; at most max_chars characters. malloc'ed, NUL-terminated
 * (s may hold NULs: each is barred). */
char *gs_text_clean(const char *s, size_t n, size_t max_chars);

#endif
