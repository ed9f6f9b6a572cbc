/*
 * Logging. The level is read once (GPUSLICE_LOG) and GS_LOG compares one int
 * before formatting anything, so a disabled level costs a predictable branch
 * on the paths that matter. One write(2) per line keeps lines from several
 * threads and processes whole.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int gs_log_level = GS_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int gs_log_init(const char *value)
{
    if (!value || !*value)
        return 0;
    for (int i = 0; i < 4; i++) {
        if (strcmp(value, level_names[i]) == 0) {
            gs_log_level = i;
            return 0;
        }
    }
    return -1;
}

void gs_log_write(int level, const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "gpuslice[%d]: %s: ", (int)getpid(),
                     level_names[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* nothing sensible to do if stderr is gone */
}
