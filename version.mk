# gpuslice's version, read from pyproject.toml: the one place it is kept.
# The Python side reads it back from the installed package's metadata
# (ocihook/version.py); the Makefiles that include this file take it from here
# (the packages' check, and native/hook's generated version.h).
GPUSLICE_VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' \
                      $(dir $(lastword $(MAKEFILE_LIST)))pyproject.toml)
