// A tenant that launches once, then idles until its stdin closes: run
// high-priority or capped under the shim, it stays on the card (presence,
// docs/compute-limit.md), so its uncapped neighbours stay paced while it
// idles. Prints "ready" once its launch is done.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void empty() {}

int main() {
    empty<<<1, 1>>>();
    if (cudaDeviceSynchronize() != cudaSuccess) { fprintf(stderr, "launch failed\n"); return 1; }
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF) {}
    return 0;
}
