"""The limit contract as cdi/ spells it: the environment names a slice's
processes are given and the compute priority's words.

Their one definition is native/include/gpuslice/limits.h. cdi/ reads no
header (it never imports ocihook/, whose cheader reads them), so the values
are repeated here once, and tests/test_limits_contract.py fails when one of
them differs from the header's or when any other Python or C place spells one
itself.
"""
from __future__ import annotations

MEMORY_LIMIT_ENV = "GPUSLICE_MEMORY_LIMIT"  # GPUSLICE_ENV_MEMORY_LIMIT
CORE_LIMIT_ENV = "GPUSLICE_CORE_LIMIT"  # GPUSLICE_ENV_CORE_LIMIT
PRIORITY_ENV = "GPUSLICE_PRIORITY"  # GPUSLICE_ENV_PRIORITY
DRIVER_VERSION_ENV = "GPUSLICE_DRIVER_VERSION"  # GPUSLICE_ENV_DRIVER_VERSION
# A slice of a card in MPS mode: NVIDIA's client settings.
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"  # GPUSLICE_ENV_MPS_PIPE_DIRECTORY
MPS_LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"  # GPUSLICE_ENV_MPS_LOG_DIRECTORY
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"  # GPUSLICE_ENV_MPS_ACTIVE_THREAD_PERCENTAGE
MPS_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"  # GPUSLICE_ENV_MPS_PINNED_DEVICE_MEM_LIMIT
# A card's sharing mode: card-time caps (the default) or NVIDIA MPS.
MODE_TIME = "time"  # GPUSLICE_MODE_TIME
MODE_MPS = "mps"  # GPUSLICE_MODE_MPS
MODES = (MODE_TIME, MODE_MPS)

PRIORITY_HIGH = "high"  # GPUSLICE_PRIORITY_HIGH_WORD
PRIORITY_NORMAL = "normal"  # GPUSLICE_PRIORITY_NORMAL_WORD
PRIORITY_LOW = "low"  # GPUSLICE_PRIORITY_LOW_WORD
# In the order of precedence; the accountant's CHECK on its priority column
# (a migration, never edited) lists the same, which tests compare too.
PRIORITIES = (PRIORITY_HIGH, PRIORITY_NORMAL, PRIORITY_LOW)
DEFAULT_PRIORITY = PRIORITY_NORMAL
