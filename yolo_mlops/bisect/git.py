"""The repository side of a bisection: revisions, the commit range, and one installed copy of the code per commit.

Each commit is checked out with `git worktree add --detach` into a temporary folder (the user's working tree
is never touched), installed from there with `pip install --no-deps --no-build-isolation --target <site>`
(the package layout of that commit, `yolo_mlops.flows` included, exactly as that commit's pyproject.toml says),
and the worktree is removed at once: the runs import the installed copy, `PYTHONPATH=<site>`. A plain
`PYTHONPATH=<worktree>` would not do: this project is usually installed editable, and the editable finder
maps `yolo_mlops.flows` to the checkout's own `flows/` whatever the path says.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from yolo_mlops.errors import ConfigError

GIT_TIMEOUT_S = 60
INSTALL_TIMEOUT_S = 600


@dataclass(frozen=True)
class Commit:
    hash: str
    subject: str

    @property
    def short(self) -> str:
        return self.hash[:10]

    def line(self) -> str:
        return f"{self.short} {self.subject}"


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise ConfigError("git is not installed: bisect needs it") from None
    if check and done.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} in {repo} failed: {_first_line(done.stderr)}")
    return done


def project_repo() -> Path:
    """The repository holding this package's code (`git rev-parse --show-toplevel` of the package folder)."""
    here = Path(__file__).resolve().parent
    done = subprocess.run(
        ["git", "-C", str(here), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=GIT_TIMEOUT_S
    )
    if done.returncode != 0:
        raise ConfigError(f"this installation of yolo-mlops ({here}) is not in a git repository: pass --repo PATH")
    return Path(done.stdout.strip())


def check_repo(path: Path) -> Path:
    """The top folder of the git repository at `path`; one line when there is none."""
    if not path.is_dir():
        raise ConfigError(f"--repo {path}: no such folder")
    done = git(path, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        raise ConfigError(f"--repo {path} is not a git repository")
    return Path(done.stdout.strip())


def resolve(repo: Path, rev: str) -> Commit:
    """The commit a revision names; one line when there is none."""
    done = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise ConfigError(f"revision {rev!r} does not name a commit in {repo}")
    commit = done.stdout.strip()
    return Commit(commit, subject(repo, commit))


def subject(repo: Path, commit: str) -> str:
    return git(repo, "log", "-1", "--format=%s", commit).stdout.strip()


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", older, newer, check=False).returncode == 0


def check_clean(repo: Path) -> None:
    """Uncommitted changes to tracked files: the user may believe they are bisected; they are not."""
    status = git(repo, "status", "--porcelain", "--untracked-files=no").stdout
    if status.strip():
        changed = [line[3:] for line in status.splitlines()][:3]
        raise ConfigError(
            f"repository {repo} has uncommitted changes to tracked files ({', '.join(changed)}"
            f"{', ...' if len(status.splitlines()) > 3 else ''}): commit or stash them first "
            "(bisect runs committed code only)"
        )


def commit_range(repo: Path, good: Commit, bad: Commit) -> list[Commit]:
    """The commits after `good` up to `bad` on bad's first-parent line, oldest first (bad last)."""
    if good.hash == bad.hash:
        raise ConfigError(f"--good and --bad name the same commit {good.short}: nothing to bisect")
    if not is_ancestor(repo, good.hash, bad.hash):
        raise ConfigError(f"good commit {good.short} is not an ancestor of bad commit {bad.short}")
    out = git(repo, "rev-list", "--reverse", "--first-parent", "--format=%H %s", f"{good.hash}..{bad.hash}").stdout
    commits = [
        Commit(*(line.split(" ", 1) + [""])[:2]) for line in out.splitlines() if line and not line.startswith("commit ")
    ]
    first_parent = git(repo, "rev-parse", f"{commits[0].hash}^1").stdout.strip() if commits else ""
    if first_parent != good.hash:
        raise ConfigError(
            f"good commit {good.short} is not on the first-parent line of bad commit {bad.short} "
            f"(it was merged in from a side branch): pick --good on that line, e.g. "
            f"`git merge-base {good.short} {bad.short}`"
        )
    return commits


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no message"


class Installs:
    """One installed copy of the code per commit, under a temporary folder removed on exit (also on errors
    and Ctrl-C). Worktrees live only while their commit installs; `close` removes any left and prunes."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.root = Path(tempfile.mkdtemp(prefix="yolo-mlops-bisect-"))
        self._sites: dict[str, Path] = {}
        self._worktrees: list[Path] = []
        self.install_s: dict[str, float] = {}  # commit -> seconds its worktree + install took

    def __enter__(self) -> Installs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def site(self, commit: Commit) -> Path:
        """The folder to put on PYTHONPATH for `commit` (installed on first use)."""
        if commit.hash not in self._sites:
            t0 = time.perf_counter()
            worktree = self.root / f"worktree-{commit.short}"
            site = self.root / f"site-{commit.short}"
            git(self.repo, "worktree", "add", "--detach", str(worktree), commit.hash)
            self._worktrees.append(worktree)
            try:
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--no-deps",
                        "--no-build-isolation",
                        "--no-compile",
                        "--disable-pip-version-check",
                        "--target",
                        str(site),
                        str(worktree),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=INSTALL_TIMEOUT_S,
                    cwd=self.root,
                )
                if done.returncode != 0:
                    raise RuntimeError(f"commit {commit.short} does not install: {_first_line(done.stderr)}")
            finally:
                self._remove_worktree(worktree)
            self._sites[commit.hash] = site
            self.install_s[commit.hash] = time.perf_counter() - t0
        return self._sites[commit.hash]

    def _remove_worktree(self, worktree: Path) -> None:
        git(self.repo, "worktree", "remove", "--force", str(worktree), check=False)
        shutil.rmtree(worktree, ignore_errors=True)
        if worktree in self._worktrees:
            self._worktrees.remove(worktree)

    def close(self) -> None:
        for worktree in list(self._worktrees):
            self._remove_worktree(worktree)
        git(self.repo, "worktree", "prune", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
