/*
 * Per-process map from what the driver handed out (device pointer, VMM
 * handle, array, context) to what we charged for it. Open addressing with
 * linear probing and backward-shift deletion (no tombstones, so a long-lived
 * process that allocates and frees forever never degrades). Its own
 * process-local mutex: it is touched on alloc/free only, never by readers.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    uint64_t key; /* 0: empty */
    int ns;
    struct gs_alloc a;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;
static size_t cap, count; /* cap: a power of two */

static size_t hash(int ns, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)ns << 56)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29));
}

/* Where (ns, key) is, or the empty bucket where it would go. */
static size_t find(int ns, uint64_t key)
{
    size_t i = hash(ns, key) & (cap - 1);
    while (table[i].key && !(table[i].key == key && table[i].ns == ns))
        i = (i + 1) & (cap - 1);
    return i;
}

static int grow(void)
{
    size_t ncap = cap ? cap * 2 : 256;
    struct entry *old = table, *nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -1;
    size_t ocap = cap;
    table = nt;
    cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key)
            table[find(old[i].ns, old[i].key)] = old[i];
    free(old);
    return 0;
}

int gs_ptrmap_put(int ns, uint64_t key, const struct gs_alloc *a)
{
    /* Key 0 marks empty; the driver never hands out 0, but stay correct. */
    key = key ? key : ~0ull;
    pthread_mutex_lock(&mu);
    if ((count + 1) * 2 > cap && grow() != 0) {
        pthread_mutex_unlock(&mu);
        return -1;
    }
    size_t i = find(ns, key);
    if (!table[i].key)
        count++;
    table[i] = (struct entry){.key = key, .ns = ns, .a = *a};
    pthread_mutex_unlock(&mu);
    return 0;
}

int gs_ptrmap_take(int ns, uint64_t key, struct gs_alloc *out)
{
    key = key ? key : ~0ull;
    pthread_mutex_lock(&mu);
    if (!cap) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    size_t i = find(ns, key);
    if (!table[i].key) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    *out = table[i].a;
    /* Backward-shift: pull later entries of the run into the hole. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & (cap - 1);
        if (!table[j].key)
            break;
        size_t home = hash(table[j].ns, table[j].key) & (cap - 1);
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            table[hole] = table[j];
            hole = j;
        }
    }
    table[hole].key = 0;
    count--;
    pthread_mutex_unlock(&mu);
    return 1;
}

size_t gs_ptrmap_count(void)
{
    pthread_mutex_lock(&mu);
    size_t n = count;
    pthread_mutex_unlock(&mu);
    return n;
}

void gs_ptrmap_fork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

void gs_ptrmap_fork_parent(void)
{
    pthread_mutex_unlock(&mu);
}

void gs_ptrmap_fork_child(void)
{
    /* The parent's allocations stay the parent's: charged to its entry, freed
     * by it. The child starts empty (the table is leaked, not freed: another
     * thread of the parent may have been inside malloc at fork time). */
    table = NULL;
    cap = count = 0;
    pthread_mutex_init(&mu, NULL);
}
