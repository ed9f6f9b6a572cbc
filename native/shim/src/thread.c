/*
 * The shim's own threads (the gate's watcher, presence, NVML's start):
 * detached, named, and with every signal blocked, for the application's
 * signals are not for them; and the futex its threads wait on each other with.
 */
#define _GNU_SOURCE /* pthread_setname_np, syscall */
#include "gpuslice.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int gs_thread_start(void *(*fn)(void *), void *arg, const char *name)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    int r = pthread_attr_init(&a);
    pthread_t t;
    if (r == 0) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        r = pthread_create(&t, &a, fn, arg);
        pthread_attr_destroy(&a);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0)
        return -1;
    pthread_setname_np(t, name);
    return 0;
}

void gs_futex_wait(unsigned *word, unsigned seen, int shared, unsigned long long ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, word, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, seen,
            ns == GS_FUTEX_FOREVER ? NULL : &ts, NULL, 0);
}

void gs_futex_wake(unsigned *word, int shared)
{
    syscall(SYS_futex, word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1 << 30, NULL, NULL, 0);
}
