/*
 * A priority's word and its number (gpuslice/limits.h), both ways. C only
 * (static inline): cffi reads the headers beside ../limits.h.
 */
#ifndef GPUSLICE_C_PRIORITY_H
#define GPUSLICE_C_PRIORITY_H

#include <string.h>

#include "gpuslice/limits.h"

/* The words in the order of precedence, as help texts list them. */
#define GPUSLICE_PRIORITY_CHOICES                                                             \
    GPUSLICE_PRIORITY_HIGH_WORD "|" GPUSLICE_PRIORITY_NORMAL_WORD "|" GPUSLICE_PRIORITY_LOW_WORD

static const char *const gpuslice_priority_words[GPUSLICE_PRIORITIES] = {
    [GPUSLICE_PRIORITY_NORMAL] = GPUSLICE_PRIORITY_NORMAL_WORD,
    [GPUSLICE_PRIORITY_HIGH] = GPUSLICE_PRIORITY_HIGH_WORD,
    [GPUSLICE_PRIORITY_LOW] = GPUSLICE_PRIORITY_LOW_WORD,
};

/* The number of word, or -1 if it is none of the words. */
static inline int gpuslice_priority_code(const char *word)
{
    for (int i = 0; i < GPUSLICE_PRIORITIES; i++)
        if (strcmp(word, gpuslice_priority_words[i]) == 0)
            return i;
    return -1;
}

#endif
