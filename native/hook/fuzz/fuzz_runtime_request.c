/*
 * libFuzzer harness for gpuslice-runtime's reading of config.json
 * (runtime/request.c, gs_rt_text_asks): any bytes, any JSON shape (an
 * array at the top included), an answer and nothing read out of bounds or
 * uninitialised.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../runtime/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int asks = gs_rt_text_asks((const char *)data, size);
    if (asks != 0 && asks != 1)
        abort();
    return 0;
}
