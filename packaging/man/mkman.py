#!/usr/bin/env python3
"""The man pages of the `gpuslice` command, made from its click commands:
gpuslice(8) and one page per command (gpuslice-cdi-generate(8), ...) in the
sections of podman-run(1) and runc(8). Each page's synopsis, options and
examples are the CLI's own (its parameters, its help, its epilog's examples),
so a page cannot say an option the command does not take; what a page says
beyond --help is kept here (DETAILS, FILES, ENVIRONMENT, SEE_ALSO).

The pages are committed, so the packages and install.sh need no click at
build time; tests/test_manpages.py fails when they differ from what this
makes now. The other programs' pages (HANDWRITTEN) are written by hand and
checked against their own --help there.

    python3 packaging/man/mkman.py          (re)write packaging/man/gpuslice*.8
    python3 packaging/man/mkman.py --check  exit 1 naming each page that differs
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Tuple

import click

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # this tree's ocihook, installed or not

from ocihook import config as config_mod  # noqa: E402
from ocihook.cli import cli  # noqa: E402

# The pages of the other programs, kept by hand.
HANDWRITTEN = ("gpuslice-hook.8", "gpuslice-runtime.8", "gpuslice-cdi-cache.8",
               "gpuslice-nomad-device.8")

# What a command's page says beyond its --help; `x` is set in bold.
DETAILS: Dict[str, List[str]] = {
    "": ["gpuslice gives each container a hard slice of GPU memory and, independently, a "
         "cap on compute. Container engines that read CDI specs (Podman 4.1 and later, "
         "Docker 25 and later, containerd 1.7 and later, CRI-O) apply the spec that "
         "`gpuslice cdi generate` writes; older engines start containers through "
         "gpuslice-runtime(8). gpuslice-hook(8), which the spec names, admits each "
         "container against the node's accountant or refuses it with one line that says "
         "why.",
         "Each command has its own page, named below."],
    "cdi generate": ["NVML says what cards there are; the spec is written atomically (by "
                     "default SPEC_DIR/gpuslice.yaml, SPEC_DIR being the configuration's "
                     "spec_dir, /etc/cdi) and the accountant is told the cards. A device "
                     "name is a card's index, a slice (`0-4g-30`: 4 GiB, 30 % of the "
                     "card's time), a gang (`2x4g`) or `all`."],
    "cdi list": ["Names such as `gpuslice.io/gpu=0` or `gpuslice.io/gpu=0-4g-30`; a spec "
                 "a runtime would ignore is named on standard error."],
    "config show": ["The file's values over the built-in defaults, as YAML that "
                    "`gpuslice config check` accepts."],
    "config apply": ["The CDI spec is not touched: profiles change with "
                     "`gpuslice cdi generate`."],
    "status": ["Per card: whether it is in service (and if not, why and since when); "
               "--json also lists each container's processes and the memory each holds."],
    "top": ["Per card, memory used (NVML) and reserved, utilization, health; per "
            "container, memory used against its slice, card time against its cap, the "
            "share of time it slept for the cap, its priority; per process, the memory it "
            "holds. --once prints one frame as text, its rates over one second, for "
            "scripts."],
    "exporter": ["Read at each scrape; the accountant is opened read-only. IPv6: "
                 "[::1]:10463; every address: :10463; port 0: a free one, named in the log. "
                 "The package's gpuslice-exporter.service runs it (not enabled at "
                 "installation). /usr/share/doc/gpuslice/metrics.md lists every metric."],
    "release": ["CONTAINER_ID is the container's full id, as its engine shows it."],
    "resize": ["An id prefix must have at least 4 characters and belong to one container "
               "only. The new memory cap is also what cuMemGetInfo reports, and new "
               "processes keep it whatever the spec's environment says. A refused shrink "
               "names both numbers (exit 1). A gang cannot be resized."],
    "health watch": ["Critical XIDs are all but the applications' 13, 31, 43, 45, 68 and "
                     "109, and those given with --ignore-xid; a lost card is "
                     "NVML_ERROR_GPU_IS_LOST. New slices and whole cards there are then "
                     "refused with the reason; what runs there is left alone. An error is "
                     "one line in the journal, then a retry."],
    "card disable": ["The containers running on the card are listed and left alone."],
    "mps start": ["The daemon is nvidia-cuda-mps-control -d, run as root with the card's UUID "
                  "in CUDA_VISIBLE_DEVICES, its pipes, logs and shared memory under the state "
                  "dir, in a mount namespace where the card's shm folder is /dev/shm. "
                  "gpuslice-mps@.service runs this command for its instance's card."],
    "card enable": ["Whatever took the card out: the health watcher, an operator, or "
                    "`gpuslice cdi generate` not seeing it. Lists the containers running "
                    "there."],
    "setup docker": ["The daemon's version comes from `dockerd --version` or "
                     "--docker-version. Docker 20 to 24 get gpuslice-runtime as a runtime "
                     "(`docker run --runtime gpuslice -e GPUSLICE=0-4g ...`); Docker 25 and "
                     "later read the CDI spec themselves (`docker run --device "
                     "gpuslice.io/gpu=0-4g ...`). Restart dockerd afterwards."],
    "setup containerd": ["The daemon's version comes from `containerd --version` or "
                         "--containerd-version. Restart containerd afterwards."],
    "setup podman": ["Podman reads /etc/cdi and /var/run/cdi itself; a spec_dir elsewhere "
                     "is added to containers.conf's cdi_spec_dirs."],
    "slurm": ["Jobs that ask for --gres=shard:k get k of a card's slurm_shards shards as a "
              "hard memory slice (and a compute cap with slurm_cores). gpuslice's SPANK "
              "plugin runs the admit and release commands in each step's slurmstepd; "
              "/usr/share/doc/gpuslice/slurm.md tells the setup."],
    "slurm admit": ["Run by the SPANK plugin, as root, in the step's slurmstepd. The slice "
                    "is held as slurm-JOB by that slurmstepd's pid; later steps of the job "
                    "share it. A refusal is one line on standard error, which the plugin "
                    "prints in the job's output."],
    "slurm release": ["Run by the SPANK plugin at the end of the step that holds the slice "
                      "(with --pid) and in the job's epilog (without)."],
    "slurm gres": ["One gpu and one shard line per card of the CDI spec, in index order, "
                   "between two marker lines; other lines of the file are kept."],
    "slurm bind": ["For `srun --container`: oci.conf's RunTimeRun. Binds only the "
                   "configuration's shim_path, the card files and the job's folder (when it "
                   "belongs to the container's user), and adds LD_PRELOAD and GPUSLICE_* from "
                   "that folder's slurm.env to the container's env; a step without shards is "
                   "left as it is."],
}

# FILES entries, and which pages name which.
FILE_TEXT: Dict[str, Tuple[str, str]] = {
    "config": (config_mod.DEFAULT_PATH, "The configuration (or the file that --config or "
               f"${config_mod.ENV_VAR} names)."),
    "spec": ("/etc/cdi/gpuslice.yaml", "The CDI spec (in the configuration's spec_dir)."),
    "db": ("/var/lib/gpuslice/state.db", "The node accountant: what every container holds "
           "on every card, and the admission policy."),
    "run": ("/run/gpuslice", "Per-container folders, each with the region its processes "
            "share, and the card files."),
    "daemon.json": ("/etc/docker/daemon.json", "dockerd's configuration."),
    "config.toml": ("/etc/containerd/config.toml", "containerd's configuration."),
    "containers.conf": ("/etc/containers/containers.conf", "Podman's configuration."),
}
NODE = ["config", "db", "run"]
FILES: Dict[str, List[str]] = {
    "": ["config", "spec", "db", "run"],
    "config show": ["config"], "config check": ["config"], "config apply": ["config", "db"],
    "cdi generate": ["config", "spec", "db"], "cdi list": ["config", "spec"],
    "cdi validate": ["spec"],
    "setup docker": ["config", "daemon.json"], "setup containerd": ["config", "config.toml"],
    "setup podman": ["config", "containers.conf"],
}

ENVIRONMENT: Dict[str, List[Tuple[str, str]]] = {
    "setup podman": [("CONTAINERS_CONF", "When set here, Podman run from this environment "
                      "reads that file instead: a warning says so.")],
}

SEE_ALSO: Dict[str, List[str]] = {
    "": ["gpuslice-hook(8)", "gpuslice-runtime(8)", "gpuslice-cdi-cache(8)",
         "gpuslice-nomad-device(8)", "podman-run(1)"],
    "cdi generate": ["gpuslice-hook(8)"], "cdi list": ["podman-run(1)"],
    "setup docker": ["gpuslice-runtime(8)", "dockerd(8)"],
    "setup containerd": ["gpuslice-runtime(8)", "containerd(8)"],
    "setup podman": ["containers.conf(5)", "podman-run(1)"],
    "release": ["gpuslice-hook(8)"], "gc": ["gpuslice-hook(8)"], "resize": ["gpuslice-hook(8)"],
    "slurm": ["slurmd(8)", "gres.conf(5)"], "slurm admit": ["gpuslice-hook(8)"],
    "slurm release": ["gpuslice-hook(8)"], "slurm gres": ["gres.conf(5)", "slurm.conf(5)"],
    "slurm bind": ["oci.conf(5)", "runc(8)"],
}

EXIT_STATUS = ("0 on success; 1 when a check finds a difference or a request is refused; "
               "2 for bad input, with one line on standard error that names the value and "
               "the rule.")


# -- roff --------------------------------------------------------------------

def _escape(text: str) -> str:
    """Plain text as roff: backslashes and hyphens escaped, `x` in bold."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)


def _lines(text: str) -> Iterator[str]:
    """A paragraph of text as filled roff source: no line may start with a
    control character."""
    for line in textwrap.wrap(_escape(text), 78, break_long_words=False, break_on_hyphens=False):
        yield "\\&" + line if line[0] in ".'" else line


def _paragraphs(paras: Sequence[str]) -> List[str]:
    out: List[str] = []
    for i, para in enumerate(paras):
        if i:
            out.append(".PP")
        out.extend(_lines(para))
    return out


def _page_name(path: str) -> str:
    return "gpuslice" + "".join(f"-{part}" for part in path.split())


def _ref(page: str) -> str:
    name, section = re.fullmatch(r"(.+)\((\d)\)", page).groups()  # type: ignore[union-attr]
    return f".BR {_escape(name)} ({section})"


# -- click ---------------------------------------------------------------------

def commands() -> Iterator[Tuple[str, click.Command]]:
    """Every command that runs something, by its path ("cdi generate"), in
    --help's order."""
    def walk(prefix: str, group: click.Group) -> Iterator[Tuple[str, click.Command]]:
        for name in sorted(group.commands):
            cmd = group.commands[name]
            path = f"{prefix} {name}".strip()
            if isinstance(cmd, click.Group):
                yield from walk(path, cmd)
            else:
                yield path, cmd
    return walk("", cli)


def _help_option(opt: click.Parameter) -> bool:
    return isinstance(opt, click.Option) and "--help" in opt.opts


def _metavar(opt: click.Option) -> str:
    if opt.is_flag:
        return ""
    if opt.metavar:
        return opt.metavar
    if isinstance(opt.type, click.Choice):
        return "|".join(str(c) for c in opt.type.choices)
    return opt.type.name.upper()


def _option_tag(opt: click.Option) -> str:
    spellings = sorted(opt.opts + opt.secondary_opts, key=lambda n: n.startswith("--"))
    names = ", ".join(f"\\fB{_escape(n)}\\fR" for n in spellings)
    meta = _metavar(opt)
    return f"{names} \\fI{_escape(meta)}\\fR" if meta else names


def _option_help(opt: click.Option) -> str:
    text = opt.help or ""
    if opt.show_default and opt.default is not None and not opt.is_flag:
        text += f" [default: {opt.default}]"
    return text


def _options(params: Sequence[click.Parameter]) -> List[str]:
    out: List[str] = []
    for opt in params:
        if isinstance(opt, click.Option) and not _help_option(opt):
            out += [".TP", _option_tag(opt), *_lines(_option_help(opt))]
    return out


def _usage_args(cmd: click.Command) -> str:
    parts = []
    for arg in cmd.params:
        if isinstance(arg, click.Argument):
            name = arg.human_readable_name
            text = f"\\fI{_escape(name)}\\fR" + ("..." if arg.nargs == -1 else "")
            parts.append(text if arg.required else f"[{text}]")
    return " ".join(parts)


def _examples(cmd: click.Command) -> List[str]:
    """The example lines of the epilog that ocihook.clitext.examples made."""
    lines = [line[2:] for line in (cmd.epilog or "").splitlines() if line.startswith("  ")]
    if not lines:
        raise SystemExit(f"mkman: {cmd.name}: no examples in its epilog (ocihook.clitext.examples)")
    return [".PP", ".RS 4", ".nf", *(("\\&" + _escape(line)) for line in lines), ".fi", ".RE"]


def _short(cmd: click.Command) -> str:
    """The NAME line's words: the summary --help lists, as a man page's NAME
    puts it (small first letter, no full stop)."""
    text = cmd.get_short_help_str(limit=200).rstrip(".")
    return text[:1].lower() + text[1:]


# -- pages ---------------------------------------------------------------------

GLOBAL = f"[\\fB\\-\\-config\\fR \\fI{_escape('FILE')}\\fR]"


def _header(name: str, what: str) -> List[str]:
    # .nh, .ad l: a command or a path split by hyphenation reads as another
    # one, and one stretched line of them reads worse than a ragged edge.
    return [f'.TH {_escape(name.upper())} 8 "" "gpuslice" "System Administration"', ".nh",
            ".ad l",
            ".SH NAME", f"{_escape(name)} \\- {_escape(what)}"]


def _tail(path: str, siblings: Sequence[str]) -> List[str]:
    env = [(config_mod.ENV_VAR, "The configuration file, when --config is not given "
            f"(default {config_mod.DEFAULT_PATH}).")] + ENVIRONMENT.get(path, [])
    out = [".SH ENVIRONMENT"]
    for name, text in env:
        out += [".TP", f".B {_escape(name)}", *_lines(text)]
    out.append(".SH FILES")
    for key in FILES.get(path, NODE):
        where, text = FILE_TEXT[key]
        out += [".TP", f".I {_escape(where)}", *_lines(text)]
    out += [".SH EXIT STATUS", *_lines(EXIT_STATUS), ".SH SEE ALSO"]
    refs = ([] if path == "" else ["gpuslice(8)"]) + list(siblings) + SEE_ALSO.get(path, [])
    out += [_ref(r) + ("," if i + 1 < len(refs) else "") for i, r in enumerate(refs)]
    return out


def command_page(path: str, cmd: click.Command, siblings: Sequence[str]) -> str:
    name = _page_name(path)
    has_options = any(isinstance(p, click.Option) and not _help_option(p) for p in cmd.params)
    synopsis = " ".join(filter(None, [
        f"\\fBgpuslice\\fR {GLOBAL} \\fB{_escape(path)}\\fR",
        "[\\fIOPTIONS\\fR]" if has_options else "", _usage_args(cmd)]))
    out = _header(name, _short(cmd)) + [".SH SYNOPSIS", synopsis, ".SH DESCRIPTION"]
    out += _paragraphs([p.replace("\n", " ") for p in (cmd.help or "").split("\n\n")]
                       + DETAILS.get(path, []))
    out.append(".SH OPTIONS")
    out += _options(cmd.params) if has_options else _lines(
        "None but --help; the global --config goes before the command (gpuslice(8)).")
    out += [".SH EXAMPLES", *_examples(cmd)] + _tail(path, siblings)
    return "\n".join(out) + "\n"


def overview_page() -> str:
    out = _header("gpuslice", "share NVIDIA GPUs between containers: memory slices and "
                  "compute caps")
    out += [".SH SYNOPSIS", f"\\fBgpuslice\\fR {GLOBAL} \\fICOMMAND\\fR [\\fIARGS\\fR...]",
            ".br", "\\fBgpuslice \\-\\-version\\fR", ".SH DESCRIPTION"]
    out += _paragraphs(DETAILS[""])
    out += [".SH OPTIONS", *_options(cli.params), ".TP", "\\fB\\-h\\fR, \\fB\\-\\-help\\fR",
            "Print the help and exit; after a command, that command's.", ".SH COMMANDS"]
    for path, cmd in commands():
        out += [".TP", _ref(f"{_page_name(path)}(8)"),
                *_lines(cmd.get_short_help_str(limit=200))]
    out += [".SH EXAMPLES", *_examples(cli)] + _tail("", [])
    return "\n".join(out) + "\n"


def pages() -> Dict[str, str]:
    """File name -> text of every page this makes."""
    cmds = list(commands())
    made = {"gpuslice.8": overview_page()}
    for path, cmd in cmds:
        group = path.rsplit(" ", 1)[0] if " " in path else None
        siblings = [f"{_page_name(p)}(8)" for p, _ in cmds
                    if group and p != path and p.startswith(group + " ")]
        made[_page_name(path) + ".8"] = command_page(path, cmd, siblings)
    return made


def main(argv: Sequence[str]) -> int:
    made = pages()
    if list(argv) == ["--check"]:
        stale = sorted(name for name, text in made.items()
                       if not (HERE / name).exists() or (HERE / name).read_text() != text)
        stray = sorted(p.name for p in HERE.glob("*.8")
                       if p.name not in made and p.name not in HANDWRITTEN)
        for name in stale:
            print(f"packaging/man/{name}: differs from the CLI: run python3 "
                  "packaging/man/mkman.py", file=sys.stderr)
        for name in stray:
            print(f"packaging/man/{name}: no such command: remove it", file=sys.stderr)
        return 1 if stale or stray else 0
    if argv:
        print("usage: mkman.py [--check]", file=sys.stderr)
        return 2
    for name, text in made.items():
        (HERE / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
