/*
 * The claim's token in config.json's env (see claim.h): read with the rest
 * of the bundle, so its one rule is checked before anything is opened. It
 * needs no database: the fuzz harnesses of config.json link it alone.
 */
#include "claim.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static int is_token(const char *s, size_t len)
{
    if (len != GPUSLICE_CLAIM_TOKEN_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int gs_claim_from_env(const struct gs_json *process, char **out)
{
    static const char name[] = GPUSLICE_CLAIM_ENV "=";
    const size_t nlen = sizeof name - 1;
    struct gs_json env, v, last;
    *out = NULL;
    if (!process || !gs_json_member(process, "env", &env) || env.type != GS_JSON_ARRAY)
        return GS_OK;
    /* The last entry of the name: the one runc gives the process (it sets
     * each in turn), the one the shim and gpuslice-runtime read too. */
    int found = 0;
    size_t cursor = 0;
    while (gs_json_next(&env, &cursor, NULL, &v)) {
        char head[sizeof name];
        if (v.type == GS_JSON_STRING && gs_json_string_into(&v, head, nlen) >= nlen &&
            memcmp(head, name, nlen) == 0) {
            last = v;
            found = 1;
        }
    }
    if (!found)
        return GS_OK;
    size_t len;
    char *entry = gs_json_string(&last, &len);
    if (!entry)
        return GS_OK;
    int rc = GS_OK;
    if (is_token(entry + nlen, len - nlen)) {
        *out = gs_xstrdup(entry + nlen);
    } else {
        char *shown = gs_quoted(entry + nlen, len - nlen, GS_AS_STRING);
        rc = gs_fail("process.env %s %s in config.json is not a claim (%d lowercase hex "
                     "digits, as gpuslice-nomad-device's Reserve gives it); leave it out "
                     "to be admitted as any container is", GPUSLICE_CLAIM_ENV, shown,
                     GPUSLICE_CLAIM_TOKEN_LEN);
        free(shown);
    }
    free(entry);
    return rc;
}
