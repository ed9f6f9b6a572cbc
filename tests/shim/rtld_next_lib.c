/*
 * A library that interposes getpid() the classic way, with
 * dlsym(RTLD_NEXT, "getpid"). The shim overrides dlsym; RTLD_NEXT must still
 * be resolved relative to THIS library, or the lookup finds this very
 * function again (and a real interposer recurses forever).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

pid_t getpid(void)
{
    return 4242;
}

/* 0: RTLD_NEXT found the next getpid (libc's), 1: it found ours or none. */
int rtld_next_check(void)
{
    void *next = dlsym(RTLD_NEXT, "getpid");
    return next && next != (void *)getpid ? 0 : 1;
}
