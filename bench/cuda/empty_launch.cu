// Empty-kernel launches per second (launch path cost, no compute cap set).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void empty() {}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 200000;
    for (int i = 0; i < 1000; i++) empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; i++) empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cudaGetLastError() != cudaSuccess) { fprintf(stderr, "launch failed\n"); return 1; }
    printf("%.1f\n", launches / s);
    return 0;
}
