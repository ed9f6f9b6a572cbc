/*
 * The shim's own threads (the gate's watcher, presence, NVML's start):
 * detached, named, and with every signal blocked, for the application's
 * signals are not for them.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "gpuslice.h"

#include <pthread.h>
#include <signal.h>

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
