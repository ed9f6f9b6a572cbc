/*
 * Choosing a gang's cards (see gang.h): a set's score compared rule by
 * rule, exhaustively over the sets of fitting cards when there are few
 * enough of them, else over greedy sets grown from each fitting card.
 */
#include "gang.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

unsigned gs_gang_nearness(const char *pcie, unsigned nvlinks, int numa_a, int numa_b)
{
    unsigned t = GS_PCIE_SYSTEM;
    if (pcie && (strcmp(pcie, "internal") == 0 || strcmp(pcie, "single") == 0 ||
                 strcmp(pcie, "multiple") == 0))
        t = GS_PCIE_SWITCH;
    else if (pcie && strcmp(pcie, "hostbridge") == 0)
        t = GS_PCIE_HOSTBRIDGE;
    else if ((pcie && strcmp(pcie, "node") == 0) || (numa_a >= 0 && numa_a == numa_b))
        t = GS_PCIE_NUMA;
    return nvlinks > 0 ? t : t + GS_PCIE_SYSTEM + 1;
}

struct score {
    int worst;          /* rule 1 */
    long sum;           /* rule 2 */
    long links;         /* rule 3: more is better */
    int64_t free_after; /* rule 4 */
};

struct chooser {
    const struct gs_gang_card *cards;
    size_t n, want;
    const unsigned char *near;
    const unsigned *nvlinks;
    int spread;
};

static struct score score_of(const struct chooser *c, const size_t *set)
{
    struct score s = {0, 0, 0, 0};
    for (size_t i = 0; i < c->want; i++) {
        s.free_after += c->cards[set[i]].free_after_mib;
        for (size_t j = i + 1; j < c->want; j++) {
            size_t at = set[i] * c->n + set[j];
            if (c->near[at] > s.worst)
                s.worst = c->near[at];
            s.sum += c->near[at];
            s.links += c->nvlinks[at];
        }
    }
    return s;
}

/* Rules 1-4: <0 a better than b, 0 equal, >0 worse; rule 5 is consider()'s. */
static int compare(const struct chooser *c, const struct score *a, const struct score *b)
{
    if (a->worst != b->worst)
        return a->worst < b->worst ? -1 : 1;
    if (a->sum != b->sum)
        return a->sum < b->sum ? -1 : 1;
    if (a->links != b->links)
        return a->links > b->links ? -1 : 1;
    if (a->free_after != b->free_after)
        return (c->spread ? a->free_after > b->free_after : a->free_after < b->free_after) ? -1
                                                                                            : 1;
    return 0;
}

/* Sets are kept by position in cards, which the caller orders by index;
 * sorted, so that a tie goes to the set of the lower indexes. */
static int cmp_size(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

static int lower_indexes(const struct chooser *c, const size_t *a, const size_t *b)
{
    for (size_t i = 0; i < c->want; i++)
        if (c->cards[a[i]].index != c->cards[b[i]].index)
            return c->cards[a[i]].index < c->cards[b[i]].index;
    return 0;
}

static void consider(const struct chooser *c, size_t *set, size_t *best, struct score *best_s,
                     int *have)
{
    struct score s = score_of(c, set);
    int d = *have ? compare(c, &s, best_s) : -1;
    if (d < 0 || (d == 0 && lower_indexes(c, set, best))) {
        memcpy(best, set, c->want * sizeof *set);
        *best_s = s;
        *have = 1;
    }
}

/* C(m, k), or more than limit. */
static int sets_within(size_t m, size_t k, double limit)
{
    double v = 1;
    for (size_t i = 0; i < k; i++) {
        v = v * (double)(m - i) / (double)(i + 1);
        if (v > limit)
            return 0;
    }
    return 1;
}

/* The next card for a greedy set: the one nearest the set by rules 1-3 (its
 * farthest pair with a member, then the sum, then links), then rule 4's. */
static size_t nearest(const struct chooser *c, const size_t *fit, size_t m, const size_t *set,
                      size_t k, const unsigned char *used)
{
    size_t pick = m;
    struct score ps = {0, 0, 0, 0};
    for (size_t f = 0; f < m; f++) {
        if (used[f])
            continue;
        struct score s = {0, 0, 0, c->cards[fit[f]].free_after_mib};
        for (size_t i = 0; i < k; i++) {
            size_t at = set[i] * c->n + fit[f];
            if (c->near[at] > s.worst)
                s.worst = c->near[at];
            s.sum += c->near[at];
            s.links += c->nvlinks[at];
        }
        if (pick == m || compare(c, &s, &ps) < 0) {
            pick = f;
            ps = s;
        }
    }
    return pick;
}

int gs_gang_pick(const struct gs_gang_card *cards, size_t n, const unsigned char *near,
                 const unsigned *nvlinks, size_t want, int spread, size_t *pick)
{
    struct chooser c = {cards, n, want, near, nvlinks, spread};
    size_t *fit = gs_xmalloc((n ? n : 1) * sizeof *fit), m = 0;
    for (size_t i = 0; i < n; i++)
        if (cards[i].fits)
            fit[m++] = i;
    if (want == 0 || m < want) {
        free(fit);
        return -1;
    }
    size_t *set = gs_xmalloc(want * sizeof *set), *pos = gs_xmalloc(want * sizeof *pos);
    unsigned char *used = gs_xmalloc(m);
    struct score best_s = {0, 0, 0, 0};
    int have = 0;
    if (sets_within(m, want, GS_GANG_EXACT_SETS)) {
        /* Every k-subset of fit, in lexicographic order of positions. */
        for (size_t i = 0; i < want; i++)
            pos[i] = i;
        for (;;) {
            for (size_t i = 0; i < want; i++)
                set[i] = fit[pos[i]];
            consider(&c, set, pick, &best_s, &have);
            size_t i = want;
            while (i > 0 && pos[i - 1] == m - want + i - 1)
                i--;
            if (i == 0)
                break;
            pos[i - 1]++;
            for (size_t j = i; j < want; j++)
                pos[j] = pos[j - 1] + 1;
        }
    } else {
        for (size_t seed = 0; seed < m; seed++) {
            memset(used, 0, m);
            set[0] = fit[seed];
            used[seed] = 1;
            for (size_t k = 1; k < want; k++) {
                size_t f = nearest(&c, fit, m, set, k, used);
                set[k] = fit[f];
                used[f] = 1;
            }
            qsort(set, want, sizeof *set, cmp_size);
            consider(&c, set, pick, &best_s, &have);
        }
    }
    free(used);
    free(pos);
    free(set);
    free(fit);
    return 0;
}
