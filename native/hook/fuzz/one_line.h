/*
 * What every harness checks of a message: one line a terminal shows as it
 * is. No control character (C0, DEL, C1), no U+2028/U+2029, nothing that is
 * not UTF-8: any of them aborts, and libFuzzer keeps the input.
 */
#ifndef GS_FUZZ_ONE_LINE_H
#define GS_FUZZ_ONE_LINE_H

#include <stdlib.h>
#include <string.h>

static inline void must_be_one_line(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i], cp, k;
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7F)
                abort();
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            k = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            k = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            k = 4, cp = c & 0x07;
        else
            abort();
        if (n - i < k)
            abort();
        for (unsigned j = 1; j < k; j++) {
            if ((u[i + j] & 0xC0) != 0x80)
                abort();
            cp = cp << 6 | (u[i + j] & 0x3F);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 ||
            cp == 0x2029)
            abort();
        i += k;
    }
}

#endif
