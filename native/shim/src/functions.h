/*
 * THE table of driver functions the shim touches. Everything else is derived
 * from it: the enum of indices, the names looked up in the real library, the
 * typed pointers to the real functions, the prototypes of our wrappers (so
 * the compiler checks each wrapper against its row), and the wrapper
 * addresses that dlsym and cuGetProcAddress hand out. One list, so names,
 * pointers and wrappers cannot drift apart.
 *
 *   HOOK(lib, name, ret, params)  we export a wrapper under `name`
 *   REAL(lib, name, ret, params)  we only call the real one
 *
 * Each exported variant of a driver function is its own row (cuMemAlloc and
 * cuMemAlloc_v2, cuMemAllocAsync and cuMemAllocAsync_ptsz): the driver
 * exports them separately and cuGetProcAddress may hand out any of them.
 * Launch and sync rows are handed out through dlsym and cuGetProcAddress
 * only when the process can be paced at all (launch.c: gs_pace_possible),
 * so that a process without a compute cap calls straight into the driver.
 */
#ifndef GPUSLICE_FUNCTIONS_H
#define GPUSLICE_FUNCTIONS_H

#define GS_LAUNCH_PARAMS                                                                      \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,       \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                  \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
#define GS_COOP_PARAMS                                                                        \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,       \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                  \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)

/* The launch rows, a part of the table below: launch.c knows which rows are
 * launches from here (gs_is_paced_fn), with no second list to keep. */
#define GS_LAUNCH_FUNCTIONS(HOOK)                                                             \
    HOOK(CUDA, cuLaunchKernel, CUresult, GS_LAUNCH_PARAMS)                                    \
    HOOK(CUDA, cuLaunchKernel_ptsz, CUresult, GS_LAUNCH_PARAMS)                               \
    HOOK(CUDA, cuLaunchKernelEx, CUresult,                                                    \
         (const CUlaunchConfig_prefix *config, CUfunction f, void **kernelParams,             \
          void **extra))                                                                      \
    HOOK(CUDA, cuLaunchKernelEx_ptsz, CUresult,                                               \
         (const CUlaunchConfig_prefix *config, CUfunction f, void **kernelParams,             \
          void **extra))                                                                      \
    HOOK(CUDA, cuLaunchCooperativeKernel, CUresult, GS_COOP_PARAMS)                           \
    HOOK(CUDA, cuLaunchCooperativeKernel_ptsz, CUresult, GS_COOP_PARAMS)                      \
    HOOK(CUDA, cuGraphLaunch, CUresult, (CUgraphExec hGraphExec, CUstream hStream))           \
    HOOK(CUDA, cuGraphLaunch_ptsz, CUresult, (CUgraphExec hGraphExec, CUstream hStream))

/* The waits for the GPU the pacer is told of (launch.c): a wait is not
 * idling. The syncs, the blocking copies to the host (they wait for the
 * stream's work before they copy), and the queries (a loop that polls until
 * its work is done). Handed out as the launch rows are (gs_is_paced_fn). */
#define GS_SYNC_FUNCTIONS(HOOK)                                                               \
    HOOK(CUDA, cuCtxSynchronize, CUresult, (void))                                            \
    HOOK(CUDA, cuCtxSynchronize_v2, CUresult, (CUcontext ctx))                                \
    HOOK(CUDA, cuStreamSynchronize, CUresult, (CUstream hStream))                             \
    HOOK(CUDA, cuStreamSynchronize_ptsz, CUresult, (CUstream hStream))                        \
    HOOK(CUDA, cuEventSynchronize, CUresult, (CUevent hEvent))                                \
    HOOK(CUDA, cuMemcpyDtoH_v2, CUresult,                                                     \
         (void *dstHost, CUdeviceptr srcDevice, size_t n))                                    \
    HOOK(CUDA, cuMemcpyDtoH_v2_ptds, CUresult,                                                \
         (void *dstHost, CUdeviceptr srcDevice, size_t n))                                    \
    HOOK(CUDA, cuMemcpy, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n))              \
    HOOK(CUDA, cuMemcpy_ptds, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n))         \
    HOOK(CUDA, cuEventQuery, CUresult, (CUevent hEvent))                                      \
    HOOK(CUDA, cuStreamQuery, CUresult, (CUstream hStream))                                   \
    HOOK(CUDA, cuStreamQuery_ptsz, CUresult, (CUstream hStream))

#define GS_FUNCTIONS(HOOK, REAL)                                                              \
    /* entry points: init and the two ways of finding functions */                           \
    HOOK(CUDA, cuInit, CUresult, (unsigned int flags))                                        \
    HOOK(CUDA, cuGetProcAddress, CUresult,                                                    \
         (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags))                \
    HOOK(CUDA, cuGetProcAddress_v2, CUresult,                                                 \
         (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,                  \
          CUdriverProcAddressQueryResult *symbolStatus))                                      \
    REAL(CUDA, cuDeviceGetCount, CUresult, (int *count))                                      \
    REAL(CUDA, cuDeviceGetUuid, CUresult, (CUuuid *uuid, CUdevice dev))                       \
    REAL(CUDA, cuCtxGetDevice, CUresult, (CUdevice *device))                                  \
    /* contexts: a fixed reservation per device */                                           \
    HOOK(CUDA, cuCtxCreate_v2, CUresult, (CUcontext *pctx, unsigned int flags, CUdevice dev)) \
    HOOK(CUDA, cuCtxCreate_v3, CUresult,                                                      \
         (CUcontext *pctx, void *paramsArray, int numParams, unsigned int flags,              \
          CUdevice dev))                                                                      \
    HOOK(CUDA, cuCtxCreate_v4, CUresult,                                                      \
         (CUcontext *pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev))          \
    HOOK(CUDA, cuCtxCreate, CUresult, (CUcontext *pctx, unsigned int flags, CUdevice dev))    \
    HOOK(CUDA, cuCtxDestroy_v2, CUresult, (CUcontext ctx))                                    \
    HOOK(CUDA, cuCtxDestroy, CUresult, (CUcontext ctx))                                       \
    HOOK(CUDA, cuGreenCtxCreate, CUresult,                                                    \
         (CUgreenCtx *pctx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags))        \
    HOOK(CUDA, cuGreenCtxDestroy, CUresult, (CUgreenCtx ctx))                                 \
    /* graphics interop contexts (OpenGL, VDPAU): contexts all the same */                   \
    HOOK(CUDA, cuGLCtxCreate, CUresult, (CUcontext *pctx, unsigned int flags, CUdevice dev))  \
    HOOK(CUDA, cuGLCtxCreate_v2, CUresult,                                                    \
         (CUcontext *pctx, unsigned int flags, CUdevice dev))                                 \
    HOOK(CUDA, cuVDPAUCtxCreate, CUresult,                                                    \
         (CUcontext *pctx, unsigned int flags, CUdevice dev, unsigned int vdp, void *getProc)) \
    HOOK(CUDA, cuVDPAUCtxCreate_v2, CUresult,                                                 \
         (CUcontext *pctx, unsigned int flags, CUdevice dev, unsigned int vdp, void *getProc)) \
    /* module and library loads: their globals, checked right after */                      \
    HOOK(CUDA, cuModuleLoad, CUresult, (CUmodule *module, const char *fname))                \
    HOOK(CUDA, cuModuleLoadData, CUresult, (CUmodule *module, const void *image))            \
    HOOK(CUDA, cuModuleLoadDataEx, CUresult,                                                  \
         (CUmodule *module, const void *image, unsigned int n, int *options, void **values))  \
    HOOK(CUDA, cuModuleLoadFatBinary, CUresult, (CUmodule *module, const void *fatCubin))    \
    REAL(CUDA, cuModuleUnload, CUresult, (CUmodule module))                                   \
    HOOK(CUDA, cuLibraryLoadData, CUresult,                                                   \
         (CUlibrary *library, const void *code, int *jitOptions, void **jitValues,            \
          unsigned int numJit, int *libOptions, void **libValues, unsigned int numLib))       \
    HOOK(CUDA, cuLibraryLoadFromFile, CUresult,                                               \
         (CUlibrary *library, const char *fileName, int *jitOptions, void **jitValues,        \
          unsigned int numJit, int *libOptions, void **libValues, unsigned int numLib))       \
    REAL(CUDA, cuLibraryUnload, CUresult, (CUlibrary library))                                \
    /* limits that reserve device memory in every context */                                 \
    HOOK(CUDA, cuCtxSetLimit, CUresult, (int limit, size_t value))                            \
    REAL(CUDA, cuCtxGetLimit, CUresult, (size_t *value, int limit))                           \
    REAL(CUDA, cuDeviceGetAttribute, CUresult, (int *value, int attrib, CUdevice dev))        \
    HOOK(CUDA, cuDevicePrimaryCtxRetain, CUresult, (CUcontext *pctx, CUdevice dev))           \
    HOOK(CUDA, cuDevicePrimaryCtxRelease, CUresult, (CUdevice dev))                           \
    HOOK(CUDA, cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev))                        \
    /* what programs see */                                                                   \
    HOOK(CUDA, cuMemGetInfo, CUresult, (unsigned int *free, unsigned int *total))            \
    HOOK(CUDA, cuMemGetInfo_v2, CUresult, (size_t *free, size_t *total))                     \
    HOOK(CUDA, cuDeviceTotalMem, CUresult, (unsigned int *bytes, CUdevice dev))               \
    HOOK(CUDA, cuDeviceTotalMem_v2, CUresult, (size_t *bytes, CUdevice dev))                  \
    /* plain, pitched and managed allocations */                                             \
    HOOK(CUDA, cuMemAlloc, CUresult, (CUdeviceptr_v1 *dptr, unsigned int bytesize))           \
    HOOK(CUDA, cuMemAlloc_v2, CUresult, (CUdeviceptr *dptr, size_t bytesize))                 \
    HOOK(CUDA, cuMemAllocPitch_v2, CUresult,                                                  \
         (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,              \
          unsigned int ElementSizeBytes))                                                     \
    HOOK(CUDA, cuMemAllocPitch, CUresult,                                                     \
         (CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,              \
          unsigned int Height, unsigned int ElementSizeBytes))                                \
    HOOK(CUDA, cuMemAllocManaged, CUresult,                                                   \
         (CUdeviceptr *dptr, size_t bytesize, unsigned int flags))                            \
    HOOK(CUDA, cuMemFree, CUresult, (CUdeviceptr_v1 dptr))                                    \
    HOOK(CUDA, cuMemFree_v2, CUresult, (CUdeviceptr dptr))                                    \
    /* virtual memory management (PyTorch expandable segments, NCCL) */                      \
    HOOK(CUDA, cuMemCreate, CUresult,                                                         \
         (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, \
          unsigned long long flags))                                                          \
    HOOK(CUDA, cuMemRelease, CUresult, (CUmemGenericAllocationHandle handle))                 \
    HOOK(CUDA, cuMemMap, CUresult,                                                            \
         (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,   \
          unsigned long long flags))                                                          \
    HOOK(CUDA, cuMemUnmap, CUresult, (CUdeviceptr ptr, size_t size))                          \
    /* stream-ordered allocations (pools) */                                                  \
    HOOK(CUDA, cuMemAllocAsync, CUresult, (CUdeviceptr *dptr, size_t bytesize, CUstream s))   \
    HOOK(CUDA, cuMemAllocAsync_ptsz, CUresult,                                                \
         (CUdeviceptr *dptr, size_t bytesize, CUstream s))                                    \
    HOOK(CUDA, cuMemAllocFromPoolAsync, CUresult,                                             \
         (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s))                 \
    HOOK(CUDA, cuMemAllocFromPoolAsync_ptsz, CUresult,                                        \
         (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s))                 \
    HOOK(CUDA, cuMemFreeAsync, CUresult, (CUdeviceptr dptr, CUstream s))                      \
    HOOK(CUDA, cuMemFreeAsync_ptsz, CUresult, (CUdeviceptr dptr, CUstream s))                 \
    HOOK(CUDA, cuMemPoolTrimTo, CUresult, (CUmemoryPool pool, size_t minBytesToKeep))         \
    HOOK(CUDA, cuMemPoolDestroy, CUresult, (CUmemoryPool pool))                               \
    REAL(CUDA, cuDeviceGetMemPool, CUresult, (CUmemoryPool *pool, CUdevice dev))              \
    REAL(CUDA, cuMemPoolGetAttribute, CUresult, (CUmemoryPool pool, int attr, void *value))   \
    /* graph memory nodes: charged at instantiation (graphs.c) */                            \
    HOOK(CUDA, cuGraphInstantiate, CUresult,                                                  \
         (CUgraphExec *ph, CUgraph g, CUgraphNode *err, char *log, size_t len))               \
    HOOK(CUDA, cuGraphInstantiate_v2, CUresult,                                               \
         (CUgraphExec *ph, CUgraph g, CUgraphNode *err, char *log, size_t len))               \
    HOOK(CUDA, cuGraphInstantiateWithFlags, CUresult,                                         \
         (CUgraphExec *ph, CUgraph g, unsigned long long flags))                              \
    HOOK(CUDA, cuGraphInstantiateWithParams, CUresult,                                        \
         (CUgraphExec *ph, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *params))                 \
    HOOK(CUDA, cuGraphInstantiateWithParams_ptsz, CUresult,                                   \
         (CUgraphExec *ph, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *params))                 \
    HOOK(CUDA, cuGraphExecUpdate, CUresult,                                                   \
         (CUgraphExec exec, CUgraph g, CUgraphNode *err, int *result))                        \
    HOOK(CUDA, cuGraphExecUpdate_v2, CUresult, (CUgraphExec exec, CUgraph g, void *resultInfo)) \
    HOOK(CUDA, cuGraphExecDestroy, CUresult, (CUgraphExec exec))                              \
    HOOK(CUDA, cuDeviceGraphMemTrim, CUresult, (CUdevice dev))                                \
    REAL(CUDA, cuGraphGetNodes, CUresult, (CUgraph g, CUgraphNode *nodes, size_t *n))         \
    REAL(CUDA, cuGraphNodeGetType, CUresult, (CUgraphNode node, int *type))                   \
    REAL(CUDA, cuGraphMemAllocNodeGetParams, CUresult,                                        \
         (CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *params))                              \
    REAL(CUDA, cuGraphChildGraphNodeGetGraph, CUresult, (CUgraphNode node, CUgraph *child))   \
    REAL(CUDA, cuDeviceGetGraphMemAttribute, CUresult, (CUdevice dev, int attr, void *value)) \
    REAL(CUDA, cuStreamIsCapturing_ptsz, CUresult, (CUstream hStream, int *captureStatus))  \
    /* arrays */                                                                              \
    HOOK(CUDA, cuArrayCreate_v2, CUresult,                                                    \
         (CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc))                               \
    HOOK(CUDA, cuArray3DCreate_v2, CUresult,                                                  \
         (CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc))                             \
    HOOK(CUDA, cuArrayCreate, CUresult,                                                       \
         (CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc))                            \
    HOOK(CUDA, cuArray3DCreate, CUresult,                                                     \
         (CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc))                          \
    HOOK(CUDA, cuMipmappedArrayCreate, CUresult,                                              \
         (CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,                     \
          unsigned int numMipmapLevels))                                                      \
    HOOK(CUDA, cuArrayDestroy, CUresult, (CUarray hArray))                                    \
    HOOK(CUDA, cuMipmappedArrayDestroy, CUresult, (CUmipmappedArray hMipmappedArray))         \
    /* kernel launches: the compute limiter (launch.c) */                                   \
    GS_LAUNCH_FUNCTIONS(HOOK)                                                                 \
    GS_SYNC_FUNCTIONS(HOOK)                                                                   \
    REAL(CUDA, cuCtxGetCurrent, CUresult, (CUcontext *pctx))                                  \
    REAL(CUDA, cuStreamIsCapturing, CUresult, (CUstream hStream, int *captureStatus))         \
    REAL(CUDA, cuEventCreate, CUresult, (CUevent *phEvent, unsigned int Flags))               \
    REAL(CUDA, cuEventRecord, CUresult, (CUevent hEvent, CUstream hStream))                   \
    REAL(CUDA, cuEventElapsedTime, CUresult, (float *ms, CUevent hStart, CUevent hEnd))       \
    REAL(CUDA, cuEventElapsedTime_v2, CUresult, (float *ms, CUevent hStart, CUevent hEnd))    \
    /* gates (gate.c): a word of pinned host memory that streams wait at */                  \
    REAL(CUDA, cuMemHostRegister_v2, CUresult, (void *p, size_t bytes, unsigned int flags))   \
    REAL(CUDA, cuMemHostGetDevicePointer_v2, CUresult,                                        \
         (CUdeviceptr *pdptr, void *p, unsigned int flags))                                   \
    REAL(CUDA, cuStreamWaitValue32_v2, CUresult,                                              \
         (CUstream hStream, CUdeviceptr addr, unsigned int value, unsigned int flags))        \
    /* NVML: what nvidia-smi-like tools and pynvml see */                                     \
    HOOK(NVML, nvmlDeviceGetMemoryInfo, nvmlReturn_t, (nvmlDevice_t device, nvmlMemory_t *m)) \
    HOOK(NVML, nvmlDeviceGetMemoryInfo_v2, nvmlReturn_t,                                      \
         (nvmlDevice_t device, nvmlMemory_v2_t *m))                                           \
    HOOK(NVML, nvmlDeviceGetComputeRunningProcesses, nvmlReturn_t,                            \
         (nvmlDevice_t device, unsigned int *infoCount, void *infos))                         \
    HOOK(NVML, nvmlDeviceGetComputeRunningProcesses_v2, nvmlReturn_t,                         \
         (nvmlDevice_t device, unsigned int *infoCount, void *infos))                         \
    HOOK(NVML, nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t,                         \
         (nvmlDevice_t device, unsigned int *infoCount, void *infos))                         \
    /* which cards there are: a card-less container sees only its placed ones */             \
    HOOK(NVML, nvmlDeviceGetCount, nvmlReturn_t, (unsigned int *count))                       \
    HOOK(NVML, nvmlDeviceGetCount_v2, nvmlReturn_t, (unsigned int *count))                    \
    HOOK(NVML, nvmlDeviceGetHandleByIndex, nvmlReturn_t,                                      \
         (unsigned int index, nvmlDevice_t *device))                                          \
    HOOK(NVML, nvmlDeviceGetHandleByIndex_v2, nvmlReturn_t,                                   \
         (unsigned int index, nvmlDevice_t *device))                                          \
    HOOK(NVML, nvmlDeviceGetHandleByUUID, nvmlReturn_t,                                       \
         (const char *uuid, nvmlDevice_t *device))                                            \
    REAL(NVML, nvmlDeviceGetUUID, nvmlReturn_t,                                               \
         (nvmlDevice_t device, char *uuid, unsigned int length))                              \
    REAL(NVML, nvmlDeviceGetIndex, nvmlReturn_t, (nvmlDevice_t device, unsigned int *index)) \
    /* the card's BAR1 mappings: every tenant's, not shown */                                 \
    HOOK(NVML, nvmlDeviceGetBAR1MemoryInfo, nvmlReturn_t,                                     \
         (nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory))                                 \
    /* utilization: the container's own card time, or nothing */                           \
    HOOK(NVML, nvmlDeviceGetUtilizationRates, nvmlReturn_t,                                   \
         (nvmlDevice_t device, nvmlUtilization_t *utilization))                               \
    HOOK(NVML, nvmlDeviceGetSamples, nvmlReturn_t,                                            \
         (nvmlDevice_t device, int type, unsigned long long lastSeenTimeStamp,                \
          int *sampleValType, unsigned int *sampleCount, void *samples))                      \
    HOOK(NVML, nvmlDeviceGetProcessUtilization, nvmlReturn_t,                                 \
         (nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,                   \
          unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp))           \
    HOOK(NVML, nvmlDeviceGetProcessesUtilizationInfo, nvmlReturn_t,                           \
         (nvmlDevice_t device, void *procesesUtilInfo))                                       \
    HOOK(NVML, nvmlDeviceGetEncoderUtilization, nvmlReturn_t,                                 \
         (nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs))    \
    HOOK(NVML, nvmlDeviceGetDecoderUtilization, nvmlReturn_t,                                 \
         (nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs))    \
    HOOK(NVML, nvmlDeviceGetJpgUtilization, nvmlReturn_t,                                     \
         (nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs))    \
    HOOK(NVML, nvmlDeviceGetOfaUtilization, nvmlReturn_t,                                     \
         (nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs))    \
    /* what the driver holds for this process (ctx_cost.c) */                                \
    REAL(NVML, nvmlInit_v2, nvmlReturn_t, (void))

#endif
