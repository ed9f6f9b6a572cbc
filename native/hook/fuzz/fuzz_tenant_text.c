/*
 * libFuzzer harness for common/text.c, the cleaning of tenant text (a
 * container's name): any bytes to gs_text_clean. The result is UTF-8, one
 * line (one_line.h, which checks the controls apart from the rule), holds no
 * code point the rule bars, has at most the characters asked for, and is
 * the input itself when the input was already clean.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "one_line.h"
#include "text.h"

#define MAX_CHARS 40

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    char *out = gs_text_clean(in, size, MAX_CHARS);
    size_t n = strlen(out), chars = 0;
    must_be_one_line(out, n);
    for (size_t i = 0; i < n; chars++) {
        unsigned cp;
        size_t k = gs_utf8_at((const unsigned char *)out + i, n - i, &cp);
        if (k == 0 || gs_text_barred(cp))
            abort();
        i += k;
    }
    if (chars > MAX_CHARS)
        abort();
    /* Clean input and short enough: kept byte for byte. */
    int clean = 1;
    size_t in_chars = 0;
    for (size_t i = 0; i < size && clean; in_chars++) {
        unsigned cp;
        size_t k = gs_utf8_at(data + i, size - i, &cp);
        clean = k != 0 && !gs_text_barred(cp);
        i += k ? k : 1;
    }
    if (clean && in_chars <= MAX_CHARS && (n != size || memcmp(out, in, size) != 0))
        abort();
    free(out);
    return 0;
}
