// 1 MiB cudaMalloc/cudaFree pairs per second through the runtime API.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

int main(int argc, char **argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 20000;
    void *p = nullptr;
    for (int i = 0; i < 200; i++) {  // warm: context, allocator paths
        if (cudaMalloc(&p, 1 << 20) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
        cudaFree(p);
    }
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; i++) {
        if (cudaMalloc(&p, 1 << 20) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
        cudaFree(p);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("%.1f\n", pairs / s);
    return 0;
}
