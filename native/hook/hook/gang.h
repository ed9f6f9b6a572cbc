/*
 * Placing a gang: N slices of one device, each on its own card, all in one
 * admission (rows.c reads the cards, their room and their links,
 * admission.c weighs them and words a refusal, accountant.c writes the
 * rows; this file only chooses). Two cards are as near as
 * gs_gang_nearness says: joined by NVLink or not first, then where they
 * meet in the PCIe tree (one switch, one host bridge, one NUMA node, the
 * system), so that NVLink pairs on one socket come before NVLink pairs
 * across two. The rules, in order (docs/architecture.md, Gangs):
 *   1. the farthest pair of the set as near as can be;
 *   2. the pairs as near as can be in all (the sum of their nearness);
 *   3. more NVLinks in all;
 *   4. the policy's placement: binpack (the least free memory in all after
 *      the gang, so the emptiest cards stay whole), spread (the most);
 *   5. the lowest card indexes.
 * Every set of the cards that fit is weighed while there are at most
 * GS_GANG_EXACT_SETS; beyond that (many cards, a middling gang), a greedy
 * set is grown from each card and the best of those kept.
 */
#ifndef GS_GANG_H
#define GS_GANG_H

#include <stddef.h>
#include <stdint.h>

#define GS_GANG_EXACT_SETS 200000

/* Where two cards meet in the PCIe tree, nearest first. */
enum gs_pcie_tier {
    GS_PCIE_SWITCH = 1,     /* NVML's internal, single or multiple: under PCIe switches */
    GS_PCIE_HOSTBRIDGE = 2,
    GS_PCIE_NUMA = 3,       /* NVML's node, or both cards on one known NUMA node */
    GS_PCIE_SYSTEM = 4,     /* across sockets, or nothing recorded */
};

/* A card the gang may use: its index (rule 5), whether one slice fits on
 * it now, and how much memory it would have free after one slice. */
struct gs_gang_card {
    int64_t index;
    int fits;
    int64_t free_after_mib;
};

/* Choose `want` cards of cards[0..n) that fit. near[i*n+j] and
 * nvlinks[i*n+j] say how cards i and j are joined (symmetric). spread: the
 * policy's placement is spread, else binpack. On success 0, and pick[0..want)
 * the chosen positions in cards, by ascending index (the order the gang's
 * cards reach CUDA); -1 when fewer than `want` cards fit. */
int gs_gang_pick(const struct gs_gang_card *cards, size_t n, const unsigned char *near,
                 const unsigned *nvlinks, size_t want, int spread, size_t *pick);

/* How near a pair is, from what the accountant recorded: the PCIe level's
 * name (NULL: no row), the NVLinks, and each card's NUMA node (-1 unknown).
 * The lower, the nearer: the PCIe tier (1-4) for an NVLink pair, 5 more
 * without NVLink (6-9). */
unsigned gs_gang_nearness(const char *pcie, unsigned nvlinks, int numa_a, int numa_b);

#endif
