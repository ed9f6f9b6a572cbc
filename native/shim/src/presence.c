/*
 * A capped or prioritised process's presence on its cards (presence.h).
 * Without it, an uncapped neighbour went back to the free path a second
 * after this process's last launch and queued as deep as the driver lets
 * it; the next high-priority request or capped turn then shared the card
 * with that queue, time slice by time slice, until it ran out (simulated:
 * a high decode request after a second of idling beside a matmul loop
 * took 356 ms, alone 90).
 */
#include "presence.h"

#include "gpuslice.h"
#include "pace.h"

#include <gpuslice/limits.h>
#include <time.h>

static struct gpuslice_cardfile *cards[GPUSLICE_MAX_DEVICES];
static int started;

/* Still capped there, or prioritised: a cap may be lifted while we run. */
static int managed(int dev)
{
    return gs_cfg.priority != GPUSLICE_PRIORITY_NORMAL ||
           __atomic_load_n(&gs_region()->devices[dev].core_limit, __ATOMIC_RELAXED) != 0;
}

static void *say(void *arg)
{
    (void)arg;
    const struct timespec every = {GS_PACE_PRESENCE_NS / 1000000000ull,
                                   GS_PACE_PRESENCE_NS % 1000000000ull};
    for (;;) {
        unsigned long long now = gs_now_ns();
        for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
            struct gpuslice_cardfile *c = __atomic_load_n(&cards[i], __ATOMIC_ACQUIRE);
            if (c && managed(i))
                __atomic_store_n(&c->managed_ns, now, __ATOMIC_RELAXED);
        }
        nanosleep(&every, NULL);
    }
    return NULL;
}

static void start(void)
{
    if (gs_thread_start(say, NULL, "gpuslice-here") != 0)
        /* Said at every launch instead, as before: neighbours go unpaced
         * a second after our last. */
        GS_LOG(GS_LOG_INFO, "compute: no thread to say we are on the card between launches");
}

void gs_presence_note(int dev, struct gpuslice_cardfile *c)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !c)
        return;
    if (__atomic_load_n(&cards[dev], __ATOMIC_RELAXED) != c)
        __atomic_store_n(&cards[dev], c, __ATOMIC_RELEASE);
    int no = 0;
    if (!__atomic_load_n(&started, __ATOMIC_RELAXED) &&
        __atomic_compare_exchange_n(&started, &no, 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        start();
}

void gs_presence_fork_child(void)
{
    __atomic_store_n(&started, 0, __ATOMIC_RELAXED);
}
