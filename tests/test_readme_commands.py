"""README.md's two commands stay true: CI runs exactly its test command."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands():
    text = (REPO / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_readme_starts_with_install_and_test_commands():
    install, test = readme_commands()
    assert install == "./install.sh --with-tests"
    assert test.startswith("python3 -m pytest")
    assert (REPO / "install.sh").stat().st_mode & 0o111


def test_ci_runs_the_readme_commands():
    install, test = readme_commands()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert install + " </dev/null" in ci
    assert ci[-1] == f"exec {test}"


def test_install_runs_as_root_or_through_sudo(tmp_path):
    """The first command works as root where sudo is not installed (CI, a Debian
    container) and as a user through sudo; a user without sudo gets one line.
    Run as nobody, from a copy (the tree may not be readable by nobody)."""
    import shutil
    import subprocess
    import tempfile

    work = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        work.chmod(0o755)
        shutil.copy(REPO / "install.sh", work / "install.sh")
        (work / "install.sh").chmod(0o755)
        bin_dir = work / "bin"  # id and the shell's tools, and no sudo
        bin_dir.mkdir(mode=0o755)
        for tool in ("id", "dirname", "sed"):
            (bin_dir / tool).symlink_to(shutil.which(tool))
        as_nobody = [shutil.which("setpriv") or "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                     "/bin/bash", str(work / "install.sh"), "--with-tests"]
        res = subprocess.run(as_nobody, capture_output=True, text=True, cwd="/",
                             env={"PATH": str(bin_dir)})
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr == ("install.sh: run as root: it writes /etc/gpuslice and /etc/cdi, "
                              "and sudo is not installed (as root: ./install.sh --with-tests)\n")
        # With sudo on PATH it hands itself to sudo, by absolute path, arguments kept.
        (bin_dir / "sudo").write_text(f'#!/bin/sh\necho "$@" > {work}/sudo-args\n')
        (bin_dir / "sudo").chmod(0o755)
        work.chmod(0o777)
        res = subprocess.run(as_nobody, capture_output=True, text=True, cwd="/",
                             env={"PATH": str(bin_dir)})
        assert res.returncode == 0, res.stderr
        assert (work / "sudo-args").read_text() == f"-- {work}/install.sh --with-tests\n"
    finally:
        shutil.rmtree(work)
