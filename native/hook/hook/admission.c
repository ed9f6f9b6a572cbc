/*
 * The admission rule (see admission.h): the fit, the refusals' words and
 * the placement of one card or a gang, on cards and usage the store read.
 */
#include "admission.h"

#include <stdlib.h>
#include <string.h>

#include "gang.h"
#include "gpuslice/limits.h"

int64_t gs_capacity_mib(const struct gs_policy *p, const struct gs_card *c)
{
    return (int64_t)((double)c->total_mib * p->overcommit);
}

int64_t gs_free_mib(const struct gs_policy *p, const struct gs_card *c, const struct gs_usage *u)
{
    if (u->exclusive)
        return 0;
    int64_t f = gs_capacity_mib(p, c) - u->reserved_mib;
    return f > 0 ? f : 0;
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

char *gs_holders(char **ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ids[i][gs_utf8_prefix(ids[i], 12)] = '\0';
    if (n)
        qsort(ids, n, sizeof *ids, cmp_str);
    struct gs_str h = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(ids[i], ids[i - 1]) == 0)
            continue;
        if (h.len)
            gs_str_add(&h, ", ");
        gs_str_add(&h, ids[i]);
    }
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    return gs_str_take(&h);
}

/* "card N (UUID) is out of service (reason); ..." */
static void out_of_service(struct gs_str *why, const struct gs_card *c)
{
    long long idx = (long long)c->index;
    gs_str_addf(why, "card %lld (%s) is out of service (%s); `gpuslice card enable %lld` "
                "returns it", idx, c->uuid, c->reason[0] ? c->reason : "no reason recorded",
                idx);
}

/* Held whole, or in the way of a whole card: *cls is GS_R_HELD. */
static int why_held(const struct gs_request *req, const struct gs_card *c,
                    const struct gs_usage *u, struct gs_str *why)
{
    const char *dev = req->device;
    long long idx = (long long)c->index;
    if (u->exclusive) {
        gs_str_addf(why, "%s: card %lld (%s) is held whole by %s; stop it, or ask for another "
                    "card", dev, idx, c->uuid, u->holders);
        return 1;
    }
    if (req->exclusive && u->count > 0) {
        gs_str_addf(why, "%s: card %lld (%s) cannot be held whole: %zu slice(s) hold %lld MiB "
                    "(%s); stop them first", dev, idx, c->uuid, u->count,
                    (long long)u->reserved_mib, u->holders);
        return 1;
    }
    return 0;
}

/* The card's mode against the request's, its daemon, its clients: *cls is GS_R_MPS. */
static int why_mode(const struct gs_request *req, const struct gs_card *c,
                    const struct gs_usage *u, struct gs_str *why)
{
    const char *dev = req->device;
    long long idx = (long long)c->index;
    if (!c->mps) {
        if (req->mps)
            gs_str_addf(why, "%s: card %lld (%s) is in time mode and this is a slice of it in "
                        "MPS mode; run `gpuslice cdi generate` (the spec is older than the "
                        "card's mode)", dev, idx, c->uuid);
        return req->mps;
    }
    if (req->exclusive)
        gs_str_addf(why, "%s: card %lld (%s) is in MPS mode, shared by its MPS clients, and is "
                    "not held whole; ask for a slice of it (%lld-<profile>), or set card_modes "
                    "to time for it and run `gpuslice cdi generate`", dev, idx, c->uuid, idx);
    else if (!req->mps)
        gs_str_addf(why, "%s: card %lld (%s) is in MPS mode: ask for a slice of it by name "
                    "(%lld-<profile>); a card-less slice or a gang goes to cards in time mode, "
                    "and a spec older than the mode is refreshed by `gpuslice cdi generate`",
                    dev, idx, c->uuid, idx);
    else if (!c->mps_up)
        gs_str_addf(why, "%s: card %lld (%s) is in MPS mode and its MPS control daemon is not "
                    "running; start it: `gpuslice mps start %lld` (or `systemctl start "
                    "gpuslice-mps@%lld`)", dev, idx, c->uuid, idx, idx);
    else if (u->count >= GPUSLICE_MPS_MAX_CLIENTS)
        gs_str_addf(why, "%s: card %lld (%s) has %zu containers, the most its MPS server takes "
                    "(%d clients); stop one of them or ask for another card", dev, idx,
                    c->uuid, u->count, GPUSLICE_MPS_MAX_CLIENTS);
    else
        return 0;
    return 1;
}

int gs_why_not(const struct gs_policy *p, const struct gs_request *req, const struct gs_card *c,
               const struct gs_usage *u, struct gs_str *why, const char **cls)
{
    const char *dev = req->device;
    long long idx = (long long)c->index;
    if (!c->healthy) {
        *cls = GS_R_UNHEALTHY;
        gs_str_addf(why, "%s: ", dev);
        out_of_service(why, c);
        return 1;
    }
    *cls = GS_R_MPS;
    if (why_mode(req, c, u, why))
        return 1;
    *cls = GS_R_HELD;
    if (why_held(req, c, u, why))
        return 1;
    if (req->exclusive)
        return 0;
    *cls = GS_R_MIG;
    if (c->mig) {
        gs_str_addf(why, "%s: card %lld (%s) is in MIG mode; it is offered whole only, ask for "
                    "the whole card", dev, idx, c->uuid);
        return 1;
    }
    *cls = GS_R_FULL;
    int64_t free = gs_free_mib(p, c, u);
    if (req->memory_mib > free) {
        gs_str_addf(why, "%s: card %lld (%s) has %lld MiB free of %lld MiB, %lld MiB asked; stop "
                    "a container on it or ask for less", dev, idx, c->uuid, (long long)free,
                    (long long)gs_capacity_mib(p, c), (long long)req->memory_mib);
        return 1;
    }
    *cls = GS_R_COMPUTE;
    if (req->cores && u->cores + req->cores > p->cores_limit) {
        gs_str_addf(why, "%s: card %lld (%s) has %lld%% of its compute left, %lld%% asked; stop "
                    "a capped container on it or ask for less", dev, idx, c->uuid,
                    (long long)(p->cores_limit - u->cores), (long long)req->cores);
        return 1;
    }
    return 0;
}

/* gs_why_not's answer alone. */
static int fits(const struct gs_policy *p, const struct gs_request *req, const struct gs_card *c,
                const struct gs_usage *u)
{
    struct gs_str scratch = {0};
    const char *cls;
    int no = gs_why_not(p, req, c, u, &scratch, &cls);
    gs_str_free(&scratch);
    return !no;
}

int gs_refuse_unknown(const struct gs_request *req, struct gs_refusal *r)
{
    *r = (struct gs_refusal){GS_R_UNKNOWN, ""};
    if (req->n_cards == 0)
        return gs_refuse("%s: the accountant knows no card; run `gpuslice cdi generate`",
                         req->device);
    struct gs_str list = {0};
    for (size_t i = 0; i < req->n_cards; i++) {
        if (i)
            gs_str_add(&list, ", ");
        gs_str_add(&list, req->card_uuids[i]);
    }
    int rc = gs_refuse("%s: card %s is not known to the accountant; run `gpuslice cdi generate` "
                       "after a driver or card change", req->device, list.s);
    gs_str_free(&list);
    return rc;
}

/* Whether card i is a better pick than card j for the placement: binpack
 * the least free, spread the most; ties to the lower index. */
static int better(const struct gs_policy *p, struct gs_card **cand, const struct gs_usage *use,
                  size_t i, size_t j, int spread)
{
    int64_t fi = gs_free_mib(p, cand[i], &use[i]), fj = gs_free_mib(p, cand[j], &use[j]);
    if (fi == fj)
        return cand[i]->index < cand[j]->index;
    return spread ? fi > fj : fi < fj;
}

/* No card fits: the line names the healthy card with the most free, or
 * what keeps the cards out of service if none is healthy. */
static int refuse_one(const struct gs_policy *p, const struct gs_request *req,
                      struct gs_card **cand, const struct gs_usage *use, size_t n, size_t best,
                      struct gs_refusal *r)
{
    struct gs_str why = {0};
    *r = (struct gs_refusal){GS_R_UNHEALTHY, ""};
    if (best < n) {
        if (n > 1)
            gs_str_add(&why, "no card has room; the likeliest: ");
        size_t at = why.len;
        if (!gs_why_not(p, req, cand[best], &use[best], &why, &r->cls) || why.len == at)
            gs_str_add(&why, "does not fit");
        r->card = cand[best]->uuid;
        for (size_t i = 0, k = 0; i < n; i++)
            if (!cand[i]->healthy)
                gs_str_addf(&why, "%s%lld", k++ ? ", " : "; out of service: card ",
                            (long long)cand[i]->index);
    } else if (n == 1) {
        gs_why_not(p, req, cand[0], &use[0], &why, &r->cls);
        r->card = cand[0]->uuid;
    } else {
        gs_str_addf(&why, "%s: no card is in service: ", req->device);
        for (size_t i = 0; i < n; i++) {
            if (i)
                gs_str_add(&why, "; ");
            out_of_service(&why, cand[i]);
        }
    }
    int rc = gs_refuse("%s", why.s);
    gs_str_free(&why);
    return rc;
}

int gs_place_one(const struct gs_policy *p, const struct gs_request *req, struct gs_card **cand,
                 const struct gs_usage *use, size_t n, size_t *pick, struct gs_refusal *r)
{
    size_t chosen = n, best = n;
    for (size_t i = 0; i < n; i++) {
        if (!cand[i]->healthy)
            continue;
        if (best == n || better(p, cand, use, i, best, 1))
            best = i;
        if (fits(p, req, cand[i], &use[i]) &&
            (chosen == n || better(p, cand, use, i, chosen, p->placement == GS_SPREAD)))
            chosen = i;
    }
    if (chosen == n)
        return refuse_one(p, req, cand, use, n, best, r);
    *pick = chosen;
    return GS_OK;
}

/* ----------------------------------------------------------- gangs */

/* How near each pair of candidates is (gang.h), from the cards' NUMA
 * nodes and the links recorded between them. */
static void gang_links(struct gs_card **cand, size_t n, const struct gs_link *links,
                       size_t nlinks, unsigned char *near, unsigned *nvlinks)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            near[i * n + j] = (unsigned char)gs_gang_nearness(NULL, 0, cand[i]->numa,
                                                              cand[j]->numa);
            nvlinks[i * n + j] = 0;
        }
    for (size_t l = 0; l < nlinks; l++) {
        const struct gs_link *k = &links[l];
        size_t i = n, j = n;
        for (size_t c = 0; c < n; c++) {
            if (strcmp(cand[c]->uuid, k->card_a) == 0)
                i = c;
            if (strcmp(cand[c]->uuid, k->card_b) == 0)
                j = c;
        }
        if (i == n || j == n || i == j)
            continue;
        unsigned nv = k->nvlinks > 0 ? (unsigned)(k->nvlinks > 1000 ? 1000 : k->nvlinks) : 0;
        unsigned char t = (unsigned char)gs_gang_nearness(k->pcie, nv, cand[i]->numa,
                                                           cand[j]->numa);
        near[i * n + j] = near[j * n + i] = t;
        nvlinks[i * n + j] = nvlinks[j * n + i] = nv;
    }
}

/* "a gang of N slices of M MiB[, C%]" */
static void gang_words(struct gs_str *s, const struct gs_request *req)
{
    gs_str_addf(s, "%s: a gang of %lld slices of %lld MiB", req->device, (long long)req->slices,
                (long long)req->memory_mib);
    if (req->cores)
        gs_str_addf(s, ", %lld%%", (long long)req->cores);
}

/* "; the likeliest: <why_not without its device>", or where the others are. */
static void gang_likeliest(const struct gs_policy *p, const struct gs_request *req,
                           struct gs_card **cand, const struct gs_usage *use, size_t n,
                           size_t likeliest, struct gs_str *why, struct gs_refusal *r)
{
    *r = (struct gs_refusal){GS_R_UNHEALTHY, ""};
    if (likeliest == n) {
        gs_str_add(why, "; the others are out of service or in MIG mode: `gpuslice status` "
                        "says which; stop containers on the cards or ask for fewer slices");
        return;
    }
    struct gs_str one = {0};
    gs_why_not(p, req, cand[likeliest], &use[likeliest], &one, &r->cls);
    size_t skip = strlen(req->device) + 2; /* gs_why_not's "<device>: " */
    gs_str_addf(why, "; the likeliest: %s", one.len > skip ? one.s + skip : one.s);
    gs_str_free(&one);
    r->card = cand[likeliest]->uuid;
}

/* Too few cards to hold the gang, ever (bad input: exit 2), or now (a
 * refusal naming the likeliest card that keeps it out, and its class). */
static int gang_refusal(const struct gs_policy *p, const struct gs_request *req,
                        struct gs_card **cand, const struct gs_usage *use, size_t n,
                        const struct gs_gang_card *gc, struct gs_refusal *r)
{
    struct gs_str why = {0}, able = {0}, room = {0};
    size_t nable = 0, nroom = 0, likeliest = n;
    for (size_t i = 0; i < n; i++) {
        if (!cand[i]->mig && gs_capacity_mib(p, cand[i]) >= req->memory_mib)
            gs_str_addf(&able, "%s%lld", nable++ ? ", " : "", (long long)cand[i]->index);
        if (gc[i].fits)
            gs_str_addf(&room, "%s%lld", nroom++ ? ", " : "", (long long)cand[i]->index);
        else if (cand[i]->healthy && !cand[i]->mig &&
                 (likeliest == n || gs_free_mib(p, cand[i], &use[i]) >
                                        gs_free_mib(p, cand[likeliest], &use[likeliest])))
            likeliest = i;
    }
    gang_words(&why, req);
    int rc;
    if (nable < (size_t)req->slices) {
        gs_str_addf(&why, " needs %lld cards that can hold one, and this node has %zu%s%s%s; "
                    "ask for at most %zu slices, or run `gpuslice cdi generate` after adding "
                    "cards", (long long)req->slices, nable, nable ? " (card " : "",
                    nable ? able.s : "", nable ? ")" : "", nable);
        rc = gs_fail("%s", why.s);
    } else {
        gs_str_addf(&why, " needs %lld cards with room for one each, and %zu %s room now%s%s%s",
                    (long long)req->slices, nroom, nroom == 1 ? "has" : "have",
                    nroom ? " (card " : "", nroom ? room.s : "", nroom ? ")" : "");
        gang_likeliest(p, req, cand, use, n, likeliest, &why, r);
        rc = gs_refuse("%s", why.s);
    }
    gs_str_free(&why);
    gs_str_free(&able);
    gs_str_free(&room);
    return rc;
}

int gs_place_gang(const struct gs_policy *p, const struct gs_request *req, struct gs_card **cand,
                  const struct gs_usage *use, size_t n, const struct gs_link *links,
                  size_t nlinks, size_t *pick, struct gs_refusal *r)
{
    struct gs_gang_card *gc = gs_xmalloc((n ? n : 1) * sizeof *gc);
    unsigned char *near = gs_xmalloc(n * n + 1);
    unsigned *nvlinks = gs_xmalloc((n * n + 1) * sizeof *nvlinks);
    for (size_t i = 0; i < n; i++) {
        gc[i].index = cand[i]->index;
        gc[i].fits = fits(p, req, cand[i], &use[i]);
        gc[i].free_after_mib = gs_free_mib(p, cand[i], &use[i]) - req->memory_mib;
    }
    gang_links(cand, n, links, nlinks, near, nvlinks);
    int rc = GS_OK;
    if (gs_gang_pick(gc, n, near, nvlinks, (size_t)req->slices, p->placement == GS_SPREAD,
                     pick) != 0)
        rc = gang_refusal(p, req, cand, use, n, gc, r);
    free(nvlinks);
    free(near);
    free(gc);
    return rc;
}

int64_t gs_slices_that_fit(const struct gs_policy *p, const struct gs_card *c,
                           const struct gs_usage *u, int64_t memory_mib, int64_t cores)
{
    if (u->exclusive || c->mig || memory_mib <= 0)
        return 0;
    int64_t n = gs_free_mib(p, c, u) / memory_mib;
    if (c->mps) {
        int64_t clients = GPUSLICE_MPS_MAX_CLIENTS - (int64_t)u->count;
        n = clients < n ? (clients > 0 ? clients : 0) : n;
    }
    if (cores > 0) {
        int64_t left = p->cores_limit - u->cores;
        int64_t by_cores = left > 0 ? left / cores : 0;
        n = by_cores < n ? by_cores : n;
    }
    return n;
}

/* ---------------------------------------------------------- resize */

int gs_resize_fits(const struct gs_policy *p, const struct gs_card *c, const struct gs_usage *u,
                   const char *dev, const char *cid, int64_t old_mib, int64_t old_cores,
                   int64_t mem, int64_t cores, unsigned long long used_mib)
{
    long long idx = (long long)c->index;
    int64_t others_mib = u->reserved_mib - old_mib, others_cores = u->cores - old_cores;
    int64_t room = gs_capacity_mib(p, c) - others_mib;
    if (c->mps)
        return gs_refuse("%s: card %lld (%s) is in MPS mode, where a slice's SM share and MPS "
                         "memory limit are set as its processes start; start the container "
                         "again with the profile it needs", dev, idx, c->uuid);
    if ((mem > old_mib || cores > old_cores) && !c->healthy) {
        struct gs_str why = {0};
        gs_str_addf(&why, "%s: ", dev);
        out_of_service(&why, c);
        int rc = gs_refuse("%s; it can shrink, not grow", why.s);
        gs_str_free(&why);
        return rc;
    }
    if (mem > old_mib && mem > room)
        return gs_refuse("%s: card %lld (%s) has room for %lld MiB for this slice (%lld MiB of "
                         "%lld MiB held by others), %lld MiB asked; stop a container on it or "
                         "ask for less", dev, idx, c->uuid, (long long)(room > 0 ? room : 0),
                         (long long)others_mib, (long long)gs_capacity_mib(p, c),
                         (long long)mem);
    if (cores > old_cores && cores && others_cores + cores > p->cores_limit)
        return gs_refuse("%s: card %lld (%s) has %lld%% of its compute left for this slice, "
                         "%lld%% asked; stop a capped container on it or ask for less", dev,
                         idx, c->uuid, (long long)(p->cores_limit - others_cores),
                         (long long)cores);
    if ((unsigned long long)mem < used_mib)
        return gs_refuse("%s: container %.*s's processes hold %llu MiB now, %lld MiB asked; "
                         "free memory in it first or ask for at least that", dev,
                         (int)gs_utf8_prefix(cid, 12), cid, used_mib, (long long)mem);
    return GS_OK;
}
