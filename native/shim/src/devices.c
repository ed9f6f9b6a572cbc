/*
 * The devices as the driver numbers them: the current context's device, a
 * card's UUID as NVML writes it, and the card's UUID and memory recorded
 * in the region the first time a process sees it (readers outside the
 * process, NVML's answers and the card files go by them). Beneath the
 * charging rules and the API families: it calls only the driver and the
 * region.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <stdio.h>
#include <string.h>

static unsigned int noted; /* bit per device: UUID and total recorded */

int gs_current_device(void)
{
    CUdevice dev;
    if (!HAS_REAL(cuCtxGetDevice) || REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

void gs_format_uuid(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

void gs_device_note(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES ||
        (__atomic_load_n(&noted, __ATOMIC_RELAXED) & (1u << dev)))
        return;
    /* Ask the driver first, with no lock held. */
    char uuid[GPUSLICE_UUID_SIZE] = "";
    CUuuid u;
    if (HAS_REAL(cuDeviceGetUuid) && REAL(cuDeviceGetUuid)(&u, dev) == CUDA_SUCCESS)
        gs_format_uuid(&u, uuid, sizeof uuid);
    size_t total = 0;
    if (HAS_REAL(cuDeviceTotalMem_v2))
        REAL(cuDeviceTotalMem_v2)(&total, dev);
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return;
    struct gpuslice_device *d = &r->devices[dev];
    int clash = 0;
    if (uuid[0]) {
        if (!d->uuid[0])
            memcpy(d->uuid, uuid, sizeof uuid);
        else
            clash = strcmp(d->uuid, uuid) != 0;
    }
    if (total)
        __atomic_store_n(&d->total_bytes, (unsigned long long)total, __ATOMIC_RELAXED);
    if (r->device_count < (unsigned)dev + 1)
        __atomic_store_n(&r->device_count, (unsigned)dev + 1, __ATOMIC_RELAXED);
    gs_region_unlock(r);
    if (clash)
        gs_log_write(GS_LOG_WARN, "device %d is %s here but %s in the region: processes of this "
                     "container see different device orders", dev, uuid, d->uuid);
    __atomic_fetch_or(&noted, 1u << dev, __ATOMIC_RELAXED);
}
