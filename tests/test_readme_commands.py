"""README.md's two commands stay true: CI runs exactly its test command."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands():
    text = (REPO / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_readme_starts_with_install_and_test_commands():
    install, test = readme_commands()
    assert install == "sudo ./install.sh --with-tests"
    assert test.startswith("python3 -m pytest")
    assert (REPO / "install.sh").stat().st_mode & 0o111


def test_ci_runs_the_readme_commands():
    install, test = readme_commands()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert install.replace("sudo ", "") + " </dev/null" in ci
    assert ci[-1] == f"exec {test}"
