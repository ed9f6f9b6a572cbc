// Empty-kernel launches per second (launch path cost, no compute cap set).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void empty() {}

// Usage: empty_launch [LAUNCHES [WARM_S]]: WARM_S seconds of launching
// before the timed ones (under the shim, a new process is first served as a
// request for its first half second of launching, and looks at the card at
// every launch meanwhile).
int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 200000;
    double warm_s = argc > 2 ? atof(argv[2]) : 0.0;
    auto warm_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(warm_s);
    do {
        for (int i = 0; i < 1000; i++) empty<<<1, 1>>>();
        cudaDeviceSynchronize();
    } while (std::chrono::steady_clock::now() < warm_until);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; i++) empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cudaGetLastError() != cudaSuccess) { fprintf(stderr, "launch failed\n"); return 1; }
    printf("%.1f\n", launches / s);
    return 0;
}
