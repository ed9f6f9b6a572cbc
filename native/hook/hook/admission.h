/*
 * The admission rule, in one place and without SQL: what fits a card
 * (memory within total x memory_overcommit, whole cards exclusive, compute
 * caps adding up to cores_limit, no slice of a MIG card, nothing new on a
 * card out of service), the words of each refusal and its class, and the
 * placement of a request: one card (binpack or spread) or a gang (gang.h's
 * choice, fed here). The store (store.h) reads the cards, their usage, the
 * policy and the links; accountant.c writes what this file chose; resize.c
 * asks it whether a held slice may change. Rules and messages:
 * docs/architecture.md, The hook and the accountant (a gang: Gangs).
 */
#ifndef GS_ADMISSION_H
#define GS_ADMISSION_H

#include <stddef.h>
#include <stdint.h>

#include "accountant.h"
#include "util.h"

enum gs_placement { GS_BINPACK, GS_SPREAD };

/* The node's admission policy: the policy table's one row (accountant.py). */
struct gs_policy {
    double overcommit;   /* 1.0-16.0 */
    enum gs_placement placement;
    int64_t cores_limit; /* 1-100 */
};

struct gs_card {
    int64_t index;
    char *uuid;
    int64_t total_mib;
    int mig, healthy;
    char *reason; /* health_reason: why it is out of service, "" if none recorded */
    int numa;     /* numa_node, -1 unknown (for a gang's placement) */
    int mps;      /* in MPS mode (the cards table's mode) */
    int mps_up;   /* its MPS control daemon listens (mpsdaemon.h; the caller's look) */
};

/* What a card's reservations hold together. */
struct gs_usage {
    int64_t reserved_mib, cores;
    int exclusive;
    size_t count;
    char *holders; /* the holders' ids[:12], sorted, ", "-joined (gs_holders) */
};

/* How two cards are joined, as `gpuslice cdi generate` recorded it. */
struct gs_link {
    char *card_a, *card_b, *pcie;
    int64_t nvlinks;
};

/* The classes of a refusal, for its `refuse` event (docs/architecture.md). */
#define GS_R_UNHEALTHY "unhealthy"
#define GS_R_HELD "held"        /* held whole by another, or slices stand in the way */
#define GS_R_MIG "mig"
#define GS_R_FULL "full"        /* not enough memory free */
#define GS_R_COMPUTE "compute"  /* cores_limit reached */
#define GS_R_UNKNOWN "unknown-card"
#define GS_R_MPS "mps"          /* the card's mode, its daemon or its clients keep it out */

/* A refusal's class and the uuid of the card its line names ("" if none). */
struct gs_refusal {
    const char *cls;
    const char *card;
};

/* What may be reserved on a card: toward 0, as accountant.py's Policy rounds. */
int64_t gs_capacity_mib(const struct gs_policy *p, const struct gs_card *c);
/* What is left of it (0 beside a whole card). */
int64_t gs_free_mib(const struct gs_policy *p, const struct gs_card *c, const struct gs_usage *u);

/* The holders' part of a line: ids cut to 12 code points, sorted (UTF-8
 * sorts as code points), each once, ", "-joined. Frees ids and its strings. */
char *gs_holders(char **ids, size_t n);

/* On a card in MPS mode: whole cards are refused (its tenants are MPS
 * clients, each within its SM share), a slice is one the spec made for MPS
 * (--mps) and is admitted while the card's control daemon is up, up to
 * GPUSLICE_MPS_MAX_CLIENTS containers; the SM shares add up to cores_limit
 * as card-time caps do. A --mps slice of a card in time mode is refused
 * (the spec is older than the mode). */
/* 0 if req fits on c now, else 1, the one-line reason (naming what to do)
 * added to why, and its class in *cls. */
int gs_why_not(const struct gs_policy *p, const struct gs_request *req, const struct gs_card *c,
               const struct gs_usage *u, struct gs_str *why, const char **cls);

/* The refusal of a request whose cards the accountant does not know. */
int gs_refuse_unknown(const struct gs_request *req, struct gs_refusal *r);

/* One card of cand[0..n) (by index) for req, by the policy's placement:
 * binpack the fullest that fits, spread the emptiest, ties to the lowest
 * index; cards out of service skipped. GS_OK and *pick, or GS_NO with the
 * line that names the likeliest card (or what keeps all out of service). */
int gs_place_one(const struct gs_policy *p, const struct gs_request *req, struct gs_card **cand,
                 const struct gs_usage *use, size_t n, size_t *pick, struct gs_refusal *r);

/* req->slices cards of cand[0..n) for a gang, one slice each, by gang.h's
 * rules and the links. GS_OK and pick[0..slices) by ascending index; GS_NO
 * with the line naming the likeliest card; GS_ERROR when the node has too
 * few cards that could ever hold one. */
int gs_place_gang(const struct gs_policy *p, const struct gs_request *req, struct gs_card **cand,
                  const struct gs_usage *use, size_t n, const struct gs_link *links,
                  size_t nlinks, size_t *pick, struct gs_refusal *r);

/* How many more slices of memory_mib (and cores, 0: no cap) the rule
 * would admit on c now, one after another, health aside: 0 beside a whole
 * card or on a MIG card. What `gpuslice-hook room` answers for the Nomad
 * plugin's offers. */
int64_t gs_slices_that_fit(const struct gs_policy *p, const struct gs_card *c,
                           const struct gs_usage *u, int64_t memory_mib, int64_t cores);

/* Whether the slice a container holds on c (old_mib, old_cores; use
 * includes it) may become mem, cores: growth within what the others leave,
 * none on a card out of service, never below used_mib (what its processes
 * hold now). GS_OK, or GS_NO with the line. */
int gs_resize_fits(const struct gs_policy *p, const struct gs_card *c, const struct gs_usage *u,
                   const char *device, const char *container_id, int64_t old_mib,
                   int64_t old_cores, int64_t mem, int64_t cores, unsigned long long used_mib);

#endif
