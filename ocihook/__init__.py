"""gpuslice's host side: configuration, the command line, the OCI hook and the node accountant."""
