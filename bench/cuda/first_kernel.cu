// Process start to first kernel: does one launch and exits; timed from outside.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void one(int *x) { *x = 1; }

int main() {
    int *x = nullptr;
    if (cudaMalloc(&x, sizeof(int)) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    one<<<1, 1>>>(x);
    if (cudaDeviceSynchronize() != cudaSuccess) { fprintf(stderr, "kernel failed\n"); return 1; }
    return 0;
}
