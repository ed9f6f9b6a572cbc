/*
 * The rule of gpuslice/text.h: its ranges are read from the header's string,
 * so C and Python share one list. Names are short and messages rare: a scan
 * of fifteen ranges per character costs nothing worth a table.
 */
#include "text.h"

#include <stdlib.h>

#include "gpuslice/text.h"
#include "json.h"
#include "util.h"

int gs_text_barred(unsigned cp)
{
    const char *p = GPUSLICE_TEXT_BARRED;
    while (*p) {
        char *end;
        unsigned long lo = strtoul(p, &end, 16), hi = lo;
        if (*end == '-')
            hi = strtoul(end + 1, &end, 16);
        if (cp >= lo && cp <= hi)
            return 1;
        p = *end ? end + 1 : end;
    }
    return 0;
}

char *gs_text_clean(const char *s, size_t n, size_t max_chars)
{
    struct gs_str out = {0};
    gs_str_add(&out, "");
    for (size_t i = 0, chars = 0; i < n && chars < max_chars; chars++) {
        unsigned cp;
        size_t k = gs_utf8_at((const unsigned char *)s + i, n - i, &cp);
        if (k == 0 || gs_text_barred(cp)) {
            gs_str_addc(&out, ' ');
            i += k ? k : 1;
        } else {
            gs_str_addn(&out, s + i, k);
            i += k;
        }
    }
    return gs_str_take(&out);
}
