/*
 * The admission rule (native/hook/hook/admission.c) on its own: linked
 * with gang.c and common/, no SQLite, fed cards and usage by hand. Prints
 * one line per case for tests/test_admission_unit.py.
 */
#include <stdio.h>
#include <stdlib.h>

#include "admission.h"

static struct gs_card card(int64_t index, const char *uuid)
{
    return (struct gs_card){index, (char *)uuid, 16384, 0, 1, (char *)"", -1, 0, 0};
}

static void place(const char *name, struct gs_policy p, int64_t mib, struct gs_card **cand,
                  const struct gs_usage *use, size_t n)
{
    struct gs_request req = {.container_id = "c", .device = "d", .memory_mib = mib,
                             .priority = "normal"};
    struct gs_refusal r = {NULL, ""};
    size_t pick = n;
    int rc = gs_place_one(&p, &req, cand, use, n, &pick, &r);
    char *why = gs_message_take();
    if (rc == GS_OK)
        printf("%s: card %lld\n", name, (long long)cand[pick]->index);
    else
        printf("%s: %d %s %s | %s\n", name, rc, r.cls, r.card, why);
    free(why);
}

int main(void)
{
    struct gs_card c0 = card(0, "U0"), c1 = card(1, "U1"), c2 = card(2, "U2");
    struct gs_card *cand[] = {&c0, &c1, &c2};
    struct gs_usage use[] = {{8192, 80, 0, 2, (char *)"a, b"}, {0, 0, 0, 0, (char *)""},
                             {16384, 0, 1, 1, (char *)"w"}};
    struct gs_policy binpack = {1.0, GS_BINPACK, 100}, spread = {1.0, GS_SPREAD, 100};
    place("binpack 4096", binpack, 4096, cand, use, 3);
    place("spread 4096", spread, 4096, cand, use, 3);
    place("binpack 12288", binpack, 12288, cand, use, 3);
    place("binpack 20000", binpack, 20000, cand, use, 3);
    c1.healthy = 0;
    c1.reason = (char *)"XID 79";
    place("sick 12288", binpack, 12288, cand, use, 3);
    c1.healthy = 1;
    struct gs_policy over = {1.5, GS_BINPACK, 100};
    printf("capacity 1.5: %lld, free card0: %lld, free card2: %lld\n",
           (long long)gs_capacity_mib(&over, &c0), (long long)gs_free_mib(&over, &c0, &use[0]),
           (long long)gs_free_mib(&over, &c2, &use[2]));
    printf("fit 4096:0 card0 %lld, 4096:10 card0 %lld, 4096:30 card0 %lld, card2 %lld\n",
           (long long)gs_slices_that_fit(&binpack, &c0, &use[0], 4096, 0),
           (long long)gs_slices_that_fit(&binpack, &c0, &use[0], 4096, 10),
           (long long)gs_slices_that_fit(&binpack, &c0, &use[0], 4096, 30),
           (long long)gs_slices_that_fit(&binpack, &c2, &use[2], 4096, 0));
    char **ids = malloc(3 * sizeof *ids);
    ids[0] = gs_xstrdup("ffffffffffffffff");
    ids[1] = gs_xstrdup("aaaaaaaaaaaaaaaa");
    ids[2] = gs_xstrdup("ffffffffffffffff");
    char *h = gs_holders(ids, 3);
    printf("holders: %s\n", h);
    free(h);
    return 0;
}
