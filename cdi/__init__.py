"""Container Device Interface: spec model, discovery and generation for gpuslice."""
