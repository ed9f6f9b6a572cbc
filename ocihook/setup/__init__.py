"""`gpuslice setup docker|containerd|podman`: point a container engine at gpuslice.

Docker 20-24 and containerd 1.6 read no CDI: they get gpuslice-runtime, the
OCI runtime wrapper, as a named runtime. Podman reads CDI itself: it only
needs our spec dir among its CDI spec dirs.

One module per engine (docker, containerd, podman), each with `setup()`, the
command as a function, and its edit as a pure function of the file's text
(the old text, or None for a missing file, in; the new text out; SetupError,
one line naming the file, where and what, for a file it cannot read).
common.py shows the edit as a unified diff on stdout and writes it with a
backup; every other line goes to stderr, so that
`gpuslice setup docker --dry-run > docker.diff` holds the diff alone.

Docker's daemon.json is JSON (the json module, the file's layout kept);
containerd's config.toml and Podman's containers.conf are TOML, edited as
tomlkit documents, which keep comments and layout (toml_edit.py).
"""
