// Empty-kernel launches per second from N threads, each into a non-blocking
// stream of its own (as an inference server's threads launch).
//   threads_launch THREADS LAUNCHES_PER_THREAD [WARM_S]
// WARM_S: seconds each thread launches before the timed launches (under the
// shim, a new process is first served as a request for its first half
// second of launching, and looks at the card at every launch meanwhile).
// Prints one number: launches per second, all threads together, from the
// moment they are released at once to the last one's work done.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

__global__ void empty() {}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    int each = argc > 2 ? atoi(argv[2]) : 50000;
    double warm_s = argc > 3 ? atof(argv[3]) : 0.0;
    if (threads < 1 || each < 1) { fprintf(stderr, "usage: threads_launch THREADS LAUNCHES\n"); return 2; }
    if (cudaFree(nullptr) != cudaSuccess) { fprintf(stderr, "no CUDA device\n"); return 1; }
    std::vector<cudaStream_t> streams(threads);
    for (auto &s : streams)
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) { fprintf(stderr, "stream failed\n"); return 1; }
    std::atomic<int> ready{0}, failed{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++)
        pool.emplace_back([&, t] {
            cudaStream_t s = streams[t];
            // Warm-up on this thread: its first launches set the runtime up.
            auto warm_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(warm_s);
            do {
                for (int i = 0; i < 200; i++) empty<<<1, 1, 0, s>>>();
                cudaStreamSynchronize(s);
            } while (std::chrono::steady_clock::now() < warm_until);
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            for (int i = 0; i < each; i++) empty<<<1, 1, 0, s>>>();
            if (cudaStreamSynchronize(s) != cudaSuccess || cudaGetLastError() != cudaSuccess) failed.fetch_add(1);
        });
    while (ready.load() < threads) std::this_thread::yield();
    auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (auto &th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failed.load()) { fprintf(stderr, "launch failed\n"); return 1; }
    printf("%.1f\n", (double)threads * each / s);
    return 0;
}
