"""HashiCorp's own plugin client for gpuslice-nomad-device's tests.

tests/nomad_client/main.go launches the plugin through go-plugin's client as
Nomad does; it is built here offline from Debian 12's packages
(golang-go, golang-github-hashicorp-go-plugin-dev, golang-google-grpc-dev,
golang-goprotobuf-dev, golang-github-zclconf-go-cty-dev, protobuf-compiler),
in GOPATH mode against /usr/share/gocode, with its gRPC stubs made by protoc
from the plugin's own protos (ocihook/nomad/proto). PluginClient drives it
one command a line (its usage is in main.go).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

REPO = Path(__file__).resolve().parent.parent
CLIENT_SRC = REPO / "tests" / "nomad_client"
BUILD = CLIENT_SRC / "build"
PROTO = "ocihook/nomad/proto"
# Go package of each group of protos: the generated stubs' import paths.
GO_PACKAGES = {"hclspec": ["hcl_spec"], "structs": ["attribute", "stats"], "base": ["base"],
               "device": ["device"]}
_WELL_KNOWN = {"google/protobuf/duration.proto": "github.com/golang/protobuf/ptypes/duration",
               "google/protobuf/timestamp.proto": "github.com/golang/protobuf/ptypes/timestamp"}


def build_client() -> Path:
    """tests/nomad_client/build/nomad_client, built afresh (Go's cache keeps it quick)."""
    gopath = BUILD / "gopath"
    shutil.rmtree(gopath, ignore_errors=True)
    mapping = dict(_WELL_KNOWN)
    for pkg, files in GO_PACKAGES.items():
        for f in files:
            mapping[f"{PROTO}/{f}.proto"] = f"gsnomad/{pkg}"
    opts = ",".join(["plugins=grpc"] + [f"M{k}={v}" for k, v in sorted(mapping.items())])
    for pkg, files in GO_PACKAGES.items():
        out = BUILD / "gen"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        subprocess.run(["protoc", "-I", str(REPO), f"--go_out={opts}:{out}",
                        *[f"{PROTO}/{f}.proto" for f in files]], check=True, cwd=REPO)
        dest = gopath / "src" / "gsnomad" / pkg
        dest.mkdir(parents=True)
        for made in (out / PROTO).glob("*.pb.go"):
            made.rename(dest / made.name)
    main = gopath / "src" / "nomadclient"
    main.mkdir(parents=True)
    shutil.copy(CLIENT_SRC / "main.go", main / "main.go")
    binary = BUILD / "nomad_client"
    env = dict(os.environ, GO111MODULE="off", GOFLAGS="", GOPATH=f"{gopath}:/usr/share/gocode",
               GOCACHE=str(BUILD / "gocache"))
    subprocess.run(["go", "build", "-o", str(binary), "."], check=True, cwd=main, env=env,
                   timeout=600)
    return binary


def plugin_command(folder: Path) -> Path:
    """An executable that starts this tree's plugin, as a Nomad client's
    plugin_dir holds gpuslice-nomad-device."""
    path = folder / "gpuslice-nomad-device"
    path.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m ocihook.nomad.main\n")
    path.chmod(0o755)
    return path


class PluginClient:
    """One go-plugin client and its plugin process; each command's answer is a dict."""

    def __init__(self, client: Path, plugin: Path, log: Path,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.log = log
        self._err = open(log, "w")
        self.proc = subprocess.Popen([str(client), str(plugin)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, text=True,
                                     env=env)
        self.started = self._answer()

    def _answer(self, timeout: float = 90) -> Dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"no answer from the client within {timeout} s; log: {self.log_text()}"
        line = self.proc.stdout.readline()
        assert line, f"the client exited ({self.proc.wait()}); log: {self.log_text()}"
        return json.loads(line)

    def __call__(self, command: str) -> Dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def log_text(self) -> str:
        if not self._err.closed:
            self._err.flush()
        return self.log.read_text()[-4000:]

    def close(self) -> Dict[str, Any]:
        said: Dict[str, Any] = {}
        if self.proc.poll() is None:
            said = self("kill")
            self.proc.wait(timeout=60)
        self._err.close()
        return said
