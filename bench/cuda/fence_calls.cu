// What each driver call of the pacer's fence point costs on the host, on a
// real card, with no shim: the calls pace.c makes through launch.c's io
// (whether the stream is captured, record, query the oldest entry, the
// elapsed time between two, query the newest), timed one by one between
// launches of an empty kernel, FENCE_EVERY launches a fence.
//
// Usage: fence_calls MODE FENCES [FENCE_EVERY [GAP_US [POLL]]]
//   MODE gpu: launches back to back (a queue builds up);
//   MODE host: GAP_US of host work before each launch (a host-bound loop:
//   its queue is mostly empty at a fence).
//   POLL query (default): cuEventQuery on the oldest entry, then the elapsed
//   time of a done one; elapsed: cuEventElapsedTime from the last done entry
//   first, its CUDA_ERROR_NOT_READY for an entry not done.
// Prints one line per call: "NAME MEAN_NS P50_NS P90_NS", and "launch ..."
// for the empty launches between fences.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void empty() {}

static long long now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ll + t.tv_nsec;
}

static void spin_us(int us) {
    long long until = now_ns() + us * 1000ll;
    while (now_ns() < until) {
    }
}

static void report(const char *name, std::vector<long long> &v) {
    if (v.empty())
        return;
    std::sort(v.begin(), v.end());
    long double sum = 0;
    for (long long x : v)
        sum += x;
    printf("%s %.0Lf %lld %lld %zu\n", name, sum / v.size(), v[v.size() / 2],
           v[v.size() * 9 / 10], v.size());
}

#define CHECK(x)                                                                \
    do {                                                                        \
        CUresult r_ = (x);                                                      \
        if (r_ != CUDA_SUCCESS) {                                               \
            fprintf(stderr, "%s failed: %d\n", #x, (int)r_);                    \
            return 1;                                                           \
        }                                                                       \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[1], "gpu") && strcmp(argv[1], "host"))) {
        fprintf(stderr, "usage: fence_calls gpu|host FENCES [FENCE_EVERY [GAP_US [query|elapsed]]]\n");
        return 2;
    }
    bool host = !strcmp(argv[1], "host");
    int fences = atoi(argv[2]);
    int every = argc > 3 ? atoi(argv[3]) : 10;
    int gap_us = argc > 4 ? atoi(argv[4]) : 20;
    bool by_elapsed = argc > 5 && !strcmp(argv[5], "elapsed");
    cudaFree(0);  // the runtime's primary context, current on this thread
    cudaStream_t rs;
    cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking);
    CUstream s = (CUstream)rs;
    const int ring = 64;
    CUevent ev[ring];
    for (int i = 0; i < ring; i++)
        CHECK(cuEventCreate(&ev[i], 0));  // timed, as the pacer's are
    std::vector<long long> cap, rec, q_old, q_old_done, gap, q_new, launch, g_done, g_old, g_new;
    int head = 0, count = 0, next = 0;
    CUevent ref = nullptr;
    for (int warm = 0; warm < 2; warm++) {
        for (int f = 0; f < (warm ? fences : fences / 10 + 1); f++) {
            for (int k = 0; k < every; k++) {
                if (host)
                    spin_us(gap_us);
                long long t0 = now_ns();
                empty<<<1, 1, 0, rs>>>();
                if (warm)
                    launch.push_back(now_ns() - t0);
            }
            long long t0 = now_ns();
            CUstreamCaptureStatus st;
            CHECK(cuStreamIsCapturing(s, &st));
            long long t1 = now_ns();
            while (count >= ring - 1) {  // a full ring: wait for its oldest, untimed
                CHECK(cuEventSynchronize(ev[head]));
                ref = ev[head];
                head = (head + 1) % ring;
                count--;
            }
            CUevent e = ev[next];
            next = (next + 1) % ring;
            CHECK(cuEventRecord(e, s));
            count++;
            long long t2 = now_ns();
            if (warm) {
                cap.push_back(t1 - t0);
                rec.push_back(t2 - t1);
            }
            // The pacer's poll: the oldest entries while done, then the first
            // not done. By query: cuEventQuery, then the elapsed time of one
            // done; by elapsed: cuEventElapsedTime first, whose NOT_READY says
            // the entry is not done (a query only with no reference yet).
            for (;;) {
                CUevent old = ev[head];
                long long a = now_ns();
                CUresult r;
                bool by_gap = by_elapsed && ref;
                float ms;
                r = by_gap ? cuEventElapsedTime(&ms, ref, old) : cuEventQuery(old);
                long long b = now_ns();
                if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
                    fprintf(stderr, "poll failed: %d\n", (int)r);
                    return 1;
                }
                if (r == CUDA_ERROR_NOT_READY) {
                    if (warm)
                        (by_gap ? (old == e ? g_new : g_old) : (old == e ? q_new : q_old))
                            .push_back(b - a);
                    break;
                }
                if (warm)
                    (by_gap ? g_done : q_old_done).push_back(b - a);
                if (ref && !by_gap) {
                    long long c = now_ns();
                    CHECK(cuEventElapsedTime(&ms, ref, old));
                    if (warm)
                        gap.push_back(now_ns() - c);
                }
                ref = old;
                head = (head + 1) % ring;
                if (--count == 0)
                    break;
            }
        }
    }
    cudaStreamSynchronize(rs);
    report("launch", launch);
    report("is_capturing", cap);
    report("record", rec);
    report("query_done", q_old_done);
    report("elapsed", gap);
    report("query_pending_old", q_old);
    report("query_pending_new", q_new);
    report("elapsed_done", g_done);
    report("elapsed_pending_old", g_old);
    report("elapsed_pending_new", g_new);
    return 0;
}
