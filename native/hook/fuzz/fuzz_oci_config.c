/*
 * libFuzzer harness for the bundle's config.json as the hook reads it
 * (hook/oci.c, gs_parse_bundle, then gs_rootfs_of): accepted or refused with
 * one line, the deferred root.path error one line too, nothing leaked. The
 * bundle's name holds a newline: it must not make a message two lines.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../hook/oci.h"
#include "util.h"
#include "one_line.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char bundle[] = "/run/bundles/a\nb";
    struct gs_bundle cfg;
    if (gs_parse_bundle(bundle, (const char *)data, size, &cfg) != GS_OK) {
        must_be_one_line(gs_message(), strlen(gs_message()));
        return 0;
    }
    char *rootfs = NULL;
    if (gs_rootfs_of(bundle, &cfg, &rootfs) == GS_OK) {
        if (cfg.root_error || !rootfs)
            abort();
        free(rootfs);
    } else {
        must_be_one_line(gs_message(), strlen(gs_message()));
    }
    gs_bundle_free(&cfg);
    return 0;
}
