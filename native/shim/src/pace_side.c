/*
 * Side by side (GPUSLICE_COMPUTE_SIDE, on unless 0 in the uncapped tenant).
 * With turns alone, a busy uncapped process launches only in the windows
 * capped holders leave it, (100 - cap) % of the time: a host-bound one (an
 * eager model's passes, a training step whose host work outlasts its
 * kernels) then gets less than plain time slicing gives it beside the same
 * neighbour uncapped (goal 2; docs/compute-limit.md, Side by side). Such a
 * process, whose own work seldom keeps it waiting, launches through the
 * holder's turns instead, where that holder is the only other process on
 * the card, and says so in its seat. A capped process beside such a seat is
 * charged, for its intervals, at most its launches at the time each took
 * with no such neighbour, and a margin for how much that time varies (the
 * GPU's time slices of the neighbour's kernels are not its card time); and
 * once it runs short of its cap while awake, it says so, and the uncapped
 * ones take turns again. One capped above half the card, which time slicing
 * cannot give it beside a busy neighbour, says so always.
 */
#include "pace_parts.h"

/* Charged in full for each interval beside a side-by-side seat (below):
 * host-bound, or of uneven kernels. */
static int charged_in_full(const struct gs_pacer *p)
{
    return gs_pace_host_bound(p) || p->solo_spread_ns * GS_PACE_SOLO_UNEVEN > p->solo_ns;
}

unsigned long long gs_pace_side_charge(struct gs_pacer *p, unsigned long long ns,
                                       unsigned launches)
{
    if (!launches)
        return ns;
    /* Learned only from intervals with no other process's work on the card
     * (solo_clean), and not from a busy period's first (it holds the
     * hand-over): a 30 that learned beside a neighbour's first service took
     * 577 us a launch for its own 230 and got 24-27 for seconds, a loop of
     * 13.7 ms kernels 21 ms (simulated); nor its least beside one: on an
     * H100 that was below a matmul's own time, and a 30 charged at it read
     * up to 32.0 by its units. */
    if (p->solo_clean && !p->ref_marker) {
        unsigned long long per = ns / launches;
        if (p->solo_ns) {
            unsigned long long off = per > p->solo_ns ? per - p->solo_ns : p->solo_ns - per;
            p->solo_spread_ns = (3 * p->solo_spread_ns + off) / 4;
        }
        p->solo_ns = p->solo_ns ? (3 * p->solo_ns + per) / 4 : per;
        p->solo_known_ns += ns;
        if (p->solo_known_ns >= GS_PACE_SOLO_KNOWN_NS)
            p->solo_ok = 1;
    }
    /* A host-bound process's learned time holds its host's gaps, which the
     * neighbour's kernels fill: it keeps its elapsed charges, and says it is
     * short if its work holds it below its cap (capped_epoch). The bound is its
     * average, which its own intervals straddle: held to that, an interval
     * of its longer kernels paid for a mean one while a shorter one paid
     * its own, and a 40 whose 60 and 8 us kernels alternate ran at 43.2 by
     * card time beside side-by-side graph replays, a 30 of one 3 ms kernel
     * in ten at 67.9 beside requests (simulated). So the bound lies a
     * couple of spreads above the average, and where launches are too
     * uneven for any (a long kernel among short ones), there is none: such
     * a process pays its elapsed time, and says it is short if its work
     * holds it below its cap. */
    unsigned long long most = launches * (p->solo_ns + GS_PACE_SOLO_SPREADS * p->solo_spread_ns);
    if (!p->side_near || !p->solo_ok || charged_in_full(p) || most >= ns)
        return ns;
    return most;
}

/* What it was charged, ever: its charges' parts (pace.h, charged_*), before
 * a drain's others' work was taken off. */
static unsigned long long charged_ever(const struct gs_pacer *p)
{
    return p->charged_first_ns + p->charged_later_ns + p->charged_estimated_ns;
}

int gs_pace_side_learning(const struct gs_pacer *p, struct gs_pace_io *io)
{
    unsigned cap = io->cap(io);
    return io->card && io->turns && p->solo_known_ns < GS_PACE_SOLO_KNOWN_NS && cap &&
           cap <= GS_PACE_SIDE_MOST_CAP;
}

/* A capped process: how far short of its cap it ran while awake (not asleep
 * for its cap; a wait for another capped one's turn counts, and so does a
 * stand-aside for a request: left out, a 50 beside cnn requests and a
 * host-bound step side by side took itself for whole at 43.6, simulated),
 * and whether to say it is short. */
static void capped_epoch(struct gs_pacer *p, struct gs_pace_io *io, unsigned cap,
                         unsigned long long now, unsigned long long wall,
                         unsigned long long apart, unsigned long long charged,
                         unsigned long long launches)
{
    /* One charged in full, beside a side-by-side seat, is judged by its
     * launches at their own time (learned alone) where that is less: its
     * intervals, and so its charges, hold the neighbour's time slices, and
     * by them it looked whole while it did a fraction of its work (the
     * step of a 0.6 ms kernel in twenty capped at 50 beside the tiny loop
     * side by side: 12 % of its steps alone, never short; simulated). */
    if (p->side_near && p->solo_ok && charged_in_full(p) && launches * p->solo_ns < charged)
        charged = launches * p->solo_ns;
    if (wall > apart + GS_PACE_SIDE_EPOCH_NS / 4) {
        unsigned long long awake = wall - apart;
        long long owed =
            ((long long)(awake * cap / 100) - (long long)charged) * 1000 / (long long)awake;
        p->owed_pm += (owed - p->owed_pm) / 4;
    }
    p->side_near = gs_card_others_say(io->card, io->seat, GPUSLICE_CARDFILE_SIDE, now,
                                      GS_PACE_SIDE_EPOCH_NS + GS_PACE_BACKLOG_NS);
    /* A stretch side by side: from the end of its last hold (or a turn of
     * learning), what it was owed, summed as the card time it ran short by. */
    if (p->short_until_ns > now || !p->side_near) {
        p->stretch_owed_ns = 0;
        p->stretch_since_ns = 0;
    } else if (wall > apart) {
        if (!p->stretch_since_ns)
            p->stretch_since_ns = now - wall;
        p->stretch_owed_ns += (long long)((wall - apart) * cap / 100) - (long long)charged;
    }
    /* Its time a launch learned again every few seconds after it was last
     * (a kernel that grew), charged as it was meanwhile. */
    if (p->solo_known_ns < GS_PACE_SOLO_KNOWN_NS)
        p->solo_at_ns = now;
    else if (now - p->solo_at_ns > GS_PACE_SOLO_STALE_NS)
        p->solo_known_ns = 0;
    if (cap > GS_PACE_SIDE_MOST_CAP || p->solo_known_ns < GS_PACE_SOLO_KNOWN_NS ||
        p->per_launch_ns >= GS_PACE_GATE_BATCH_NS) {
        /* Turns above half the card, which time slicing gives a busy
         * context beside another (on an H100 a 90 beside eager requests
         * side by side lost its band, 78.3 in a window, before it said it
         * was short; simulated, one look cost it nothing); while it learns
         * its own time a launch; and for kernels of a time slice or more,
         * into every one of which the GPU lets a neighbour's work (a loop
         * of 13.7 ms kernels beside a host-bound step side by side got
         * 20 % at a cap of 50, simulated): said again at every epoch. */
        if (p->short_until_ns < now + 2 * GS_PACE_SIDE_EPOCH_NS)
            p->short_until_ns = now + 2 * GS_PACE_SIDE_EPOCH_NS;
        if (cap > GS_PACE_SIDE_MOST_CAP)
            p->epochs_high++;
        else if (p->solo_known_ns < GS_PACE_SOLO_KNOWN_NS)
            p->epochs_learning++;
        else
            p->epochs_long++;
    } else if (p->side_near && p->owed_pm > GS_PACE_SHORT_PM &&
               now - p->first_epoch_ns >= GS_PACE_SHORT_SETTLE_NS) {
        /* (Not in its first second: a start's credit, a neighbour's first
         * service, are no measure of what side by side gives it.) */
        p->epochs_owed++;
        if (p->short_until_ns <= now) { /* a hold begins */
            if (p->holds < GS_PACE_HOLDS_KEPT) {
                p->hold_at_ms[p->holds] = (unsigned)((now - p->first_epoch_ns) / 1000000);
                p->hold_owed_pm[p->holds] = (int)p->owed_pm;
            }
            p->holds++;
        }
        /* Turns long enough that the stretch and the hold together leave
         * it GS_PACE_SHORT_MEAN_PM short at most (at its cap in turns): a
         * duty cycle sized to how short side by side left it. Holds of 1 s,
         * then 2, then 4 left a loop beside a 40 side by side in 3 short
         * stretches of 8 s (65 % of its steps alone, plain time slicing 84;
         * 84 with these), simulated, the capped one in its band either way. */
        long long stretch =
            p->stretch_since_ns ? (long long)(now - p->stretch_since_ns) : 0;
        long long want = p->stretch_owed_ns * 1000 / (long long)GS_PACE_SHORT_MEAN_PM - stretch;
        unsigned long long hold = clamp_ns(want > 0 ? (unsigned long long)want : 0,
                                           GS_PACE_SHORT_HOLD_MIN_NS, GS_PACE_SHORT_HOLD_MAX_NS);
        if (p->short_until_ns < now + hold)
            p->short_until_ns = now + hold;
    }
}

/* An uncapped process: how much of its time (not waiting for turns, not
 * standing aside) it waited for its own work, at fence points and in the
 * application's syncs, copies and polls; and whether it goes side by side. */
static void uncapped_epoch(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now,
                           unsigned long long wall, unsigned long long apart,
                           unsigned long long waited)
{
    if (wall > apart + GS_PACE_SIDE_EPOCH_NS / 20) {
        unsigned long long pm = waited * 1000 / (wall - apart);
        p->waiting_pm += ((int)(pm > 1000 ? 1000 : pm) - p->waiting_pm) / 2;
    }
    int shorted =
        gs_card_others_say(io->card, io->seat, GPUSLICE_CARDFILE_SHORT, now, GS_PACE_STALE_NS);
    /* Only beside one other process: two capped ones share the card by
     * turns, and each turn, time sliced with ours, gave its holder half of
     * it (a 50 and a 10 beside the eager loop side by side: the 50 at 17 %
     * while it was, then 47.5 in the window after; two 40s 36.3); beside a
     * capped one and another uncapped one in turns, the capped one waited
     * for the other's windows with our work in its turns, and lost its
     * credit (a 30 beside the step side by side and the eager loop: 26.1-27.1,
     * simulated). */
    int others = gs_card_others_seated(io->card, io->seat, now, 2);
    /* (A gated process whose driver refused its last gate may go side by
     * side as one without gates.) */
    p->side = !shorted && others < 2 && ungated(p, io) &&
              p->waiting_pm < (p->side ? GS_PACE_SIDE_OFF_PM : GS_PACE_SIDE_ON_PM);
}

void gs_pace_side_epoch(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned cap = io->cap(io);
    if (!io->card || !io->turns || io->seat < 0 || (!cap && !io->side))
        return;
    if (p->epoch_ns && now - p->epoch_ns < GS_PACE_SIDE_EPOCH_NS)
        return;
    unsigned long long wall = now - p->epoch_ns;
    unsigned long long slept = p->spent_sleep_ns - p->epoch_sleep_ns;
    unsigned long long held = p->spent_card_ns - p->epoch_card_ns;
    unsigned long long queue = p->spent_queue_ns - p->epoch_queue_ns;
    unsigned long long charged = charged_ever(p) - p->epoch_charged_ns;
    unsigned long long launches = p->spent_launches - p->epoch_launches;
    unsigned long long app = __atomic_exchange_n(&p->app_wait_ns, 0, __ATOMIC_RELAXED);
    int first = !p->epoch_ns;
    p->epoch_ns = now;
    p->epoch_sleep_ns = p->spent_sleep_ns;
    p->epoch_card_ns = p->spent_card_ns;
    p->epoch_queue_ns = p->spent_queue_ns;
    p->epoch_charged_ns = charged_ever(p);
    p->epoch_launches = p->spent_launches;
    if (first)
        p->first_epoch_ns = now; /* nothing reckoned yet, but a capped one says it is short */
    p->epochs++;
    if (cap)
        capped_epoch(p, io, cap, now, first ? 0 : wall, slept, charged, launches);
    else if (!first)
        uncapped_epoch(p, io, now, wall, held + slept, queue + app);
    p->epochs_side += !first && p->side;
    unsigned mode = (p->side ? GPUSLICE_CARDFILE_SIDE : 0u) |
                    (p->short_until_ns > now ? GPUSLICE_CARDFILE_SHORT : 0u);
    __atomic_store_n(&io->card->seats[io->seat].mode, mode, __ATOMIC_RELAXED);
}
