/*
 * Whether a card's MPS control daemon is up (see mpsdaemon.h).
 */
#include "mpsdaemon.h"

#include <stdio.h>
#include <sys/stat.h>

#include "gpuslice/statedir.h"

int gs_mps_daemon_up(const char *state_dir, const char *uuid)
{
    if (!state_dir)
        return 0;
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/" GPUSLICE_MPS_DIR "/%s/" GPUSLICE_MPS_PIPE_DIR
                     "/" GPUSLICE_MPS_CONTROL, state_dir, uuid);
    struct stat st;
    if (n < 0 || (size_t)n >= sizeof path || lstat(path, &st) != 0)
        return 0;
    /* Never a link: the state dir is root's, and what is not a pipe is no daemon. */
    return S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
}
