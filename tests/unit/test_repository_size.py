"""The checkout stays small enough to travel: what a fresh clone holds (the files git tracks, less those deleted in
the working tree, plus the untracked files git does not ignore) weighs at most 30 MiB.

Runs in: pytest, in a git checkout of this repository (`git ls-files`); skipped, saying why, where git or the
checkout is missing (an unpacked sdist, say). A GPU machine lent for a check takes the working tree and whatever
is carried beside it (wheels, a build) within 64 MiB in all, so the tree keeps under half of that. A failure names
the ten directories with the most bytes directly in them and the largest folders one and two levels down.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections import Counter
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 30 * 2**20
MiB = 2**20


def travelling_files() -> list[str]:
    """Paths (relative, POSIX) of the tracked and the untracked-but-not-ignored files, as git lists them."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the files a clone holds are git's list")
    # safe.directory: a checkout owned by another user (a CI container, say) is still this repository
    proc = subprocess.run(["git", "-c", f"safe.directory={REPO}", "-C", str(REPO), "ls-files", "-z", "--cached",
                           "--others", "--exclude-standard"], capture_output=True, timeout=120, check=False)
    if proc.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout git can read: {proc.stderr.decode(errors='replace').strip()}")
    # A path is listed twice while a merge is unresolved (one entry per stage).
    return sorted({p for p in proc.stdout.decode("utf-8", errors="surrogateescape").split("\0") if p})


def sizes(paths: list[str]) -> dict[str, int]:
    """Bytes of each path on disk: a symbolic link counts as itself (it travels as a link); a tracked file deleted
    in the working tree is gone, as it will be once the deletion is committed."""
    out = {}
    for p in paths:
        try:
            st = os.lstat(REPO / p)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):  # not a submodule's directory
            out[p] = st.st_size
    return out


def describe(by_path: dict[str, int]) -> str:
    own: Counter[str] = Counter()
    tree: Counter[str] = Counter()
    for p, n in by_path.items():
        parts = PurePosixPath(p).parts[:-1]
        own["/".join(parts) + "/" if parts else "./"] += n
        for depth in (1, 2):  # results/ and results/archive/, tests/ and tests/fixtures/
            if len(parts) >= depth:
                tree["/".join(parts[:depth]) + "/"] += n
    largest = "\n".join(f"  {n / MiB:7.2f} MiB  {d}" for d, n in own.most_common(10))
    folders = ", ".join(f"{d} {n / MiB:.1f}" for d, n in tree.most_common(10))
    return (f"the ten largest directories (files directly in them):\n{largest}\n"
            f"the largest folders one and two levels down, with all they hold (MiB): {folders}")


def test_the_checkout_weighs_at_most_30_mib():
    by_path = sizes(travelling_files())
    total = sum(by_path.values())
    assert total <= LIMIT_BYTES, (
        f"the files a clone holds weigh {total / MiB:.1f} MiB ({total:,} bytes in {len(by_path)} files), over the "
        f"{LIMIT_BYTES / MiB:.0f} MiB bound; {describe(by_path)}")
