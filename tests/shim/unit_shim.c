/*
 * Unit tests of the shim's parts that need no driver: size parsing, the
 * environment, the pointer map, the region and the charge protocol, the
 * cut of the driver's process lists.
 * Linked against the shim's object files; prints "ok NAME" per test and
 * exits non-zero on the first failure.
 */
#define _GNU_SOURCE
#include "../../native/shim/src/gpuslice.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The charging rules and the wrappers are not linked in: stubs for what the
 * linked parts ask of them (the pid the driver knows, NVML queries). */
unsigned int gs_driver_pid(void) { return 0; }
__thread int gs_own_query;
void gs_core_init(void) {}

static int failures;
#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

static void test_parse_size(void)
{
    static const struct { const char *text; int ok; unsigned long long v; } cases[] = {
        {"4GiB", 1, 4ull << 30}, {"4096MiB", 1, 4096ull << 20}, {"4g", 1, 4ull << 30},
        {"512m", 1, 512ull << 20}, {"4096m", 1, 4096ull << 20}, {"1073741824", 1, 1ull << 30},
        {"2G", 1, 2ull << 30},    {"1tib", 1, 1ull << 40},      {"0", 1, 0},
        {"12parsecs", 0, 0},      {"", 0, 0},                   {"-1", 0, 0},
        {"4 GiB", 0, 0},          {"GiB", 0, 0},                {"99999999999999999999", 0, 0},
        {"17179869184t", 0, 0},   {"1.5g", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned long long v = 0;
        int ok = gs_parse_size(cases[i].text, &v) == 0;
        if (ok != cases[i].ok || (ok && v != cases[i].v))
            fprintf(stderr, "parse_size(\"%s\"): ok=%d v=%llu\n", cases[i].text, ok, v);
        CHECK(ok == cases[i].ok && (!ok || v == cases[i].v));
    }
    puts("ok parse_size");
}

static void clear_env(void)
{
    static const char *vars[] = {"GPUSLICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT",
                                 "GPUSLICE_MEMORY_LIMIT_1", "CUDA_DEVICE_MEMORY_LIMIT_1",
                                 "GPUSLICE_CORE_LIMIT", "CUDA_DEVICE_SM_LIMIT_2",
                                 "GPUSLICE_CONTEXT_RESERVE", "GPUSLICE_DISABLE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void test_config(void)
{
    struct gs_config c;
    clear_env();
    gs_config_load(&c);
    CHECK(!c.fail_closed && !c.any_limit && c.mem_limit[0] == 0);
    CHECK(c.context_reserve == 768 * GS_MIB);

    setenv("GPUSLICE_MEMORY_LIMIT", "4g", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "8g", 1);   /* our name wins */
    setenv("CUDA_DEVICE_MEMORY_LIMIT_1", "3000m", 1); /* alias per device */
    setenv("CUDA_DEVICE_SM_LIMIT_2", "30", 1);
    setenv("GPUSLICE_CORE_LIMIT", "50", 1);
    gs_config_load(&c);
    CHECK(!c.fail_closed && c.any_limit);
    CHECK(c.mem_limit[0] == 4ull << 30 && c.mem_limit[1] == 3000ull << 20);
    CHECK(c.mem_limit[15] == 4ull << 30);
    CHECK(c.core_limit[0] == 50 && c.core_limit[2] == 30);

    setenv("GPUSLICE_MEMORY_LIMIT_1", "12parsecs", 1);
    gs_config_load(&c);
    CHECK(c.fail_closed);
    unsetenv("GPUSLICE_MEMORY_LIMIT_1");
    setenv("GPUSLICE_MEMORY_LIMIT", "1000", 1); /* under 1 MiB */
    gs_config_load(&c);
    CHECK(c.fail_closed);
    setenv("GPUSLICE_MEMORY_LIMIT", "1g", 1);
    setenv("GPUSLICE_CORE_LIMIT", "101", 1);
    gs_config_load(&c);
    CHECK(c.fail_closed);
    clear_env();
    setenv("GPUSLICE_DISABLE", "1", 1);
    gs_config_load(&c);
    CHECK(c.disabled && !c.fail_closed);
    clear_env();
    puts("ok config");
}

static void test_ptrmap(void)
{
    /* Against a plain array as the reference, with keys that collide. */
    enum { N = 20000 };
    static unsigned long long live[N];
    for (int i = 0; i < N; i++) {
        struct gs_alloc a = {.dev = i % 16, .kind = i % 5, .bytes = (unsigned long long)i};
        CHECK(gs_ptrmap_put(GS_NS_PTR, (uint64_t)i << 21, &a) == 0);
        live[i] = 1;
    }
    struct gs_alloc a = {.dev = 3, .kind = 2, .bytes = 7};
    CHECK(gs_ptrmap_put(GS_NS_VMM, 1ull << 21, &a) == 0); /* same key, other namespace */
    CHECK(gs_ptrmap_count() == N + 1);
    unsigned s = 12345;
    for (int round = 0; round < 3 * N; round++) {
        s = s * 1103515245u + 12345u;
        int i = (int)((s >> 8) % N);
        struct gs_alloc out;
        int found = gs_ptrmap_take(GS_NS_PTR, (uint64_t)i << 21, &out);
        CHECK(found == (int)live[i]);
        if (found)
            CHECK(out.bytes == (unsigned long long)i && out.dev == i % 16);
        live[i] = 0;
    }
    struct gs_alloc out;
    CHECK(gs_ptrmap_take(GS_NS_VMM, 1ull << 21, &out) == 1 && out.bytes == 7);
    CHECK(gs_ptrmap_take(GS_NS_VMM, 1ull << 21, &out) == 0);
    size_t left = 0;
    for (int i = 0; i < N; i++)
        left += live[i];
    CHECK(gs_ptrmap_count() == left);
    for (int i = 0; i < N; i++)
        if (live[i])
            CHECK(gs_ptrmap_take(GS_NS_PTR, (uint64_t)i << 21, &out) == 1);
    CHECK(gs_ptrmap_count() == 0);
    puts("ok ptrmap");
}

static void test_region(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/state", dir);
    setenv("GPUSLICE_STATE_DIR", path, 1);
    setenv("GPUSLICE_MEMORY_LIMIT_0", "1GiB", 1);
    gs_config_load(&gs_cfg);
    struct gpuslice_region *r = gs_region();
    CHECK(r->magic == GPUSLICE_REGION_MAGIC && r->size == sizeof *r);
    CHECK(gs_limit(0) == 1ull << 30 && gs_limit(1) == 0);

    /* Up to the cap, then refused; an uncapped device is not charged. */
    CHECK(gs_charge(0, GPUSLICE_KIND_ALLOC, 768 * GS_MIB) == GS_CHARGED);
    CHECK(gs_charge(0, GPUSLICE_KIND_VMM, 256 * GS_MIB) == GS_CHARGED);
    CHECK(gs_charge(0, GPUSLICE_KIND_ALLOC, 1) == GS_DENIED);
    CHECK(gs_charge(1, GPUSLICE_KIND_ALLOC, 1ull << 40) == GS_UNCAPPED);
    CHECK(gs_charge(0, GPUSLICE_KIND_ALLOC, ~0ull) == GS_DENIED); /* no overflow */
    CHECK(gs_used(0) == 1ull << 30);
    gs_uncharge(0, GPUSLICE_KIND_VMM, 256 * GS_MIB);
    CHECK(gs_used(0) == 768 * GS_MIB);
    /* Saturating: more than was charged clamps at 0 (and warns once). */
    gs_uncharge(0, GPUSLICE_KIND_VMM, 1);
    CHECK(gs_used(0) == 768 * GS_MIB - 1 || gs_used(0) == 768 * GS_MIB);
    gs_uncharge(0, GPUSLICE_KIND_ALLOC, 768 * GS_MIB);
    CHECK(gs_used(0) == 0);

    /* A child charges 768 MiB and dies: its share comes back on demand. */
    pid_t pid = fork();
    if (pid == 0)
        _exit(gs_charge(0, GPUSLICE_KIND_ALLOC, 768 * GS_MIB) == GS_CHARGED ? 0 : 1);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(gs_used(0) == 768 * GS_MIB);
    CHECK(gs_charge(0, GPUSLICE_KIND_ALLOC, 768 * GS_MIB) == GS_CHARGED);
    CHECK(gs_used(0) == 768 * GS_MIB);

    /* A child dies holding the lock, after a half-done update: the next
     * locker recovers (EOWNERDEAD) and recomputes the totals exactly. */
    pid = fork();
    if (pid == 0) {
        pthread_mutex_lock((pthread_mutex_t *)(void *)r->lock);
        r->devices[0].used_bytes += 12345; /* a torn update */
        _exit(0);
    }
    waitpid(pid, &st, 0);
    CHECK(gs_charge(0, GPUSLICE_KIND_ALLOC, 256 * GS_MIB) == GS_CHARGED);
    CHECK(gs_used(0) == 1ull << 30);
    gs_uncharge(0, GPUSLICE_KIND_ALLOC, 1ull << 30);
    CHECK(gs_used(0) == 0);
    puts("ok region");
}

static void test_layout_mismatch(const char *dir)
{
    /* Another layout in the file: refused, caps still hold per process. */
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/other", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && head -c %zu /dev/zero | tr '\\0' 'x' > %s/region",
             path, sizeof(struct gpuslice_region), path);
    CHECK(system(cmd) == 0);
    /* A fresh process: the region is opened once per process. */
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "unit_shim", "--mismatch", path, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    puts("ok layout_mismatch");
}

static int mismatch_child(const char *path)
{
    setenv("GPUSLICE_STATE_DIR", path, 1);
    setenv("GPUSLICE_MEMORY_LIMIT_0", "1GiB", 1);
    gs_config_load(&gs_cfg);
    struct gpuslice_region *r = gs_region();
    char magic[4] = {0};
    FILE *f = fopen(strcat(strcpy((char[700]){0}, path), "/region"), "r");
    int untouched = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "xxxx", 4) == 0;
    if (f)
        fclose(f);
    int ok = untouched && r->magic == GPUSLICE_REGION_MAGIC && gs_limit(0) == 1ull << 30 &&
             gs_charge(0, GPUSLICE_KIND_ALLOC, (1ull << 30) + 1) == GS_DENIED &&
             gs_charge(0, GPUSLICE_KIND_ALLOC, 1ull << 30) == GS_CHARGED;
    return ok ? 0 : 1;
}

/* An NVOS54 RM control as libnvidia-ml issues it, and GPU_GET_PIDS's answer. */
struct control {
    uint32_t client, object, cmd, flags;
    uint64_t params;
    uint32_t params_size, status;
};
struct get_pids {
    uint32_t id_type, id, count, pids[950];
};

static void test_rm_filter(void)
{
    static struct get_pids p;
    struct control c = {.cmd = 0x2080018d, .params = (uintptr_t)&p, .params_size = sizeof p};
    p.count = 4;
    p.pids[0] = 11, p.pids[1] = 22, p.pids[2] = 33, p.pids[3] = 44;
    const unsigned keep[] = {44, 22, 99};
    CHECK(gs_rm_filter(&c, keep, 3) == 2);
    CHECK(p.count == 2 && p.pids[0] == 22 && p.pids[1] == 44 && p.pids[2] == 0 && p.pids[3] == 0);
    CHECK(c.status == 0);
    /* Nobody of ours: nothing listed. */
    CHECK(gs_rm_filter(&c, keep, 0) == 2 && p.count == 0);
    /* A count past the table is read as the table. */
    p.count = 5000;
    for (int i = 0; i < 950; i++)
        p.pids[i] = (uint32_t)i + 1;
    CHECK(gs_rm_filter(&c, keep, 3) == 947 && p.count == 3);
    /* A size we do not know: refused, nothing read. */
    struct control odd = c;
    odd.params_size = sizeof p + 4;
    CHECK(gs_rm_filter(&odd, keep, 3) == -1 && odd.status != 0);
    /* Failed controls and other controls: left alone. */
    struct control failed = c;
    failed.status = 0x1f;
    p.count = 1, p.pids[0] = 11;
    CHECK(gs_rm_filter(&failed, keep, 3) == 0 && p.count == 1 && failed.status == 0x1f);
    struct control other = c;
    other.cmd = 0x20800102;
    CHECK(gs_rm_filter(&other, keep, 3) == 0 && p.count == 1);
    printf("ok rm_filter\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0); /* forked children must not repeat it */
    if (argc == 3 && strcmp(argv[1], "--mismatch") == 0)
        return mismatch_child(argv[2]);
    if (argc != 2) {
        fprintf(stderr, "usage: unit_shim TMPDIR\n");
        return 2;
    }
    test_parse_size();
    test_config();
    test_ptrmap();
    test_region(argv[1]);
    test_layout_mismatch(argv[1]);
    test_rm_filter();
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    return failures ? 1 : 0;
}
