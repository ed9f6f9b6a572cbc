"""gpuslice's host side: configuration, the command line, and (later) the OCI hook and runtime wrapper."""
