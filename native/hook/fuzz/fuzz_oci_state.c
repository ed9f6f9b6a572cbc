/*
 * libFuzzer harness for the OCI state the hook reads on stdin (hook/oci.c,
 * gs_parse_state): accepted or refused with one line, nothing leaked.
 */
#include <stdint.h>
#include <string.h>

#include "../hook/oci.h"
#include "util.h"
#include "one_line.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_state st;
    if (gs_parse_state((const char *)data, size, &st) == GS_OK) {
        if (!st.id || !gs_container_id_ok(st.id, strlen(st.id)) || !st.bundle ||
            st.bundle[0] != '/' || (st.has_pid && st.pid <= 0))
            abort();
        gs_state_free(&st);
    } else {
        must_be_one_line(gs_message(), strlen(gs_message()));
    }
    return 0;
}
