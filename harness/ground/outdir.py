"""The results directory: checked before a run (nothing written), claimed with a lock while a run writes it.

Runs in: the parent. Every subcommand that writes results (run, comm, ...) goes through here, so the rules are
the same for all: an existing directory with results is only overwritten with --force, one that cannot be
written is refused up front, and two runs never write the same directory at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from harness.ground.errors import BadInput

RESULT_FILES = ("records.jsonl", "records.jsonl.gz", "report.md", "sessions.json")
"""Files whose presence means "this directory holds results" (plots and logs always come with them)."""
LOCK_NAME = ".compare.lock"
WRITTEN = ("records.jsonl", "records.jsonl.gz", "report.md", "sessions.json", "throughput.png", "loss.png", "step_times.png",
           "pairs.png", "epoch_time.png", "ttt_curve.png", "ttt_time.png", "speedup.png", "efficiency.png",
           "memory.png", "balance.png", "prediction.png", "busbw.png")
"""Every file a compare command writes at the top of its results directory (run, scale and comm's RESULT_FILES;
a test keeps the lists together), and a run's records packed for committing (records.jsonl.gz): what --force
removes besides logs/ and a sweep's comm_n*/."""


def holder(out: Path) -> int | None:
    """The pid of a live compare process that holds `out`'s lock, else None (never creates anything)."""
    path = out / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 64).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _left_by(out: Path) -> int | None:
    """The pid a run wrote into `out`'s lock, asked where no live process holds it (`holder` is None): a run that
    finishes removes its lock, so one left behind names a run that was killed. None where there is none."""
    try:
        text = (out / LOCK_NAME).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _busy(out: Path, pid: int) -> BadInput:
    who = f"pid {pid}" if pid > 0 else "a process whose pid is not recorded"
    return BadInput(f"output directory {out} is in use by another compare run ({who}); wait for it to finish or "
                    f"choose another --out")


def one_line(out: Path) -> None:
    """Refuse an output path with a control character in it (a newline, a tab): reports, logs and scripts name
    their directory on one line."""
    bad = next((ch for ch in str(out) if not ch.isprintable() and ch != " "), None)
    if bad is not None:
        raise BadInput(f"output path {ascii(str(out))} holds a control character ({ascii(bad)}); choose another "
                       f"--out (a report names its directory on one line)")


def check(out: Path, force: bool, files: tuple[str, ...] = RESULT_FILES) -> None:
    """Refuse an output path that another run is writing, that holds results or other files this run would
    overwrite (`files`, its logs/ and a sweep's comm_n*/; without --force), that is not a UTF-8 name or that
    cannot be written, writing nothing. Writability is proven by creating and removing a probe directory:
    permission bits lie for root and for read-only mounts."""
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(out).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise BadInput(f"output path {shown} is not a UTF-8 name; choose another --out (reports name their "
                       f"directory in UTF-8 text)") from None
    one_line(out)
    try:
        _check(out, force, files)
    except OSError as exc:  # a name too long for the filesystem, a path through a file, ...
        raise BadInput(f"output path {out} cannot be used: {exc.strerror or exc}") from None


def _check(out: Path, force: bool, files: tuple[str, ...]) -> None:
    if out.is_symlink() and not out.exists():
        raise BadInput(f"output path {out} is a symbolic link to {os.readlink(out)}, which does not exist; create "
                       f"that directory, or choose another --out")
    if out.exists():
        if not out.is_dir():
            raise BadInput(f"output path {out} exists and is not a directory")
        pid = holder(out)
        if pid is not None:
            raise _busy(out, pid)
        existing = [f for f in RESULT_FILES if (out / f).exists()]
        if existing and not force:
            raise BadInput(f"output directory {out} already holds results ({', '.join(existing)}); "
                           f"use --force to overwrite or choose another --out")
        clobbered = ([f for f in files if f not in RESULT_FILES and (out / f).exists()]
                     + [f"{d}/" for d in ("logs", "traces") if (out / d).is_dir() and any((out / d).iterdir())]
                     + sorted(f"{d.name}/" for d in out.glob("comm_n*") if d.is_dir()))
        if clobbered and not force:
            left = _left_by(out)
            raise BadInput(f"output directory {out} holds files this run would overwrite ({', '.join(clobbered)})"
                           + (f", left by a compare run that never finished (pid {left}, no longer running: killed, "
                              f"or the machine stopped)" if left else "")
                           + "; use --force to overwrite them or choose another --out")
        probe_in = out
    else:
        probe_in = out.parent
        while not probe_in.exists():
            if probe_in.is_symlink():  # a link to nowhere, or a loop of links: nothing can be created under it
                raise BadInput(f"cannot create output directory {out}: {probe_in} is a symbolic link that leads "
                               f"nowhere (a missing target or a loop); choose another --out")
            probe_in = probe_in.parent
        if not probe_in.is_dir():
            raise BadInput(f"cannot create output directory {out}: {probe_in} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".compare-probe-", dir=probe_in))
    except OSError as exc:
        if exc.errno == errno.ENOENT:  # a directory that is there and takes no new entry: /proc, /sys
            raise BadInput(f"output directory {out} cannot be made: {probe_in} takes no new entries (a virtual "
                           f"filesystem such as /proc or /sys); choose another --out") from None
        raise BadInput(f"output directory {out} is not writable: {exc.strerror} ({probe_in})") from None


RECORD_BYTES = 4096
"""Bytes of one launch's record beside its per-step lists (a digits record is about 4 KB plus its steps)."""
STEP_BYTES = 36
"""Bytes per step of a record: the step time and the loss, each a JSON number of up to 18 characters."""
LOG_BYTES = 1024
"""Bytes of a clean launch's compressed log (DeepSpeed's launcher lines: about 0.7 kB)."""
REPORT_BYTES = 48 * 1024
"""report.md: the largest committed ones are about 47 KB."""
PLOT_BYTES = 256 * 1024
"""Every plot of a run together: about 110 KB in a committed run (five plots)."""


def least_written(launches: int, steps: int, plots: bool) -> int:
    """What a run of `launches` launches of `steps` steps (warm-up included) writes at least: every launch's record
    (twice at the end: records.jsonl is rewritten through a temporary file) and compressed log, the report and the
    plots. A lower bound: a failed launch's log is kept as text, and --trace adds traces."""
    per_launch = 2 * (RECORD_BYTES + STEP_BYTES * steps) + LOG_BYTES
    return launches * per_launch + REPORT_BYTES + (PLOT_BYTES if plots else 0)


def check_room(out: Path, need: int, what: str) -> None:
    """Refuse an output directory on a filesystem with less free space than `need` bytes (what the run will write
    at least: `what` says of what), before anything is created: a full filesystem used to be found at the first
    launch's records, leaving empty directories behind."""
    import shutil

    where = out if out.exists() else _existing_parent(out)
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return  # not measurable here: the run's own writes say so if the space runs out
    if free < need:
        raise BadInput(f"output directory {out} is on a filesystem with {_size(free)} free, less than the "
                       f"{_size(need)} this run will write at least ({what}); free some space or choose another "
                       f"--out")


def first_missing(out: Path) -> Path | None:
    """The outermost directory of `out` that does not exist yet (what creating `out` creates), or None."""
    missing = None
    for d in [out, *out.parents]:
        if d.exists() or d.is_symlink():
            break
        missing = d
    return missing


def remove_empty(out: Path, made: Path | None) -> None:
    """Remove `out` and its parents up to `made` (what a run created) where they hold nothing but empty directories:
    a run that could not start leaves no empty directory behind. Nothing is removed that holds a file."""
    if made is None:
        return
    for d in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) \
            if out.is_dir() else []:
        try:
            d.rmdir()
        except OSError:
            return
    for d in [out, *out.parents]:
        try:
            d.rmdir()
        except OSError:
            return
        if d == made:
            return


def _existing_parent(out: Path) -> Path:
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.0f} KiB" if n >= 1024 else f"{n} bytes"


class Claim:
    """Exclusive use of a results directory for one run: an flock held until `release()` (the kernel drops it if
    the process dies, even by SIGKILL), with the holder's pid in the lock file for the refusal message."""

    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.path = out / LOCK_NAME
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                text = os.read(fd, 64).decode(errors="replace").strip()
                os.close(fd)
                raise _busy(out, int(text) if text.isdigit() else -1) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a lock file that its holder unlinked between our open and our flock
                break
            os.close(fd)
        self.fd = fd
        try:  # the pid is only for the refusal message: a full disk must not stop the run here
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError:
            pass

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


def write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically; on failure (a full disk) the old file stays and no temp file is left."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_figure(fig, path: Path, dpi: int) -> None:
    """A matplotlib figure as PNG at `path`, atomically like write_text (never a half-written plot). Stored with a
    palette of at most 256 colours where Pillow is there (matplotlib needs it): a plot has a handful of colours and
    their anti-aliased edges, and the file is a third of the size, which is what lets the committed results travel
    to a lent GPU machine with the wheels it needs."""
    import io

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, dpi=dpi, format="png")
        try:
            from PIL import Image

            image = Image.open(buffer).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
            image.save(tmp, format="PNG", optimize=True)
        except ImportError:
            tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def clear(out: Path, files: tuple[str, ...]) -> None:
    """Remove a previous run's result files (only reached with --force, or when there were none): this command's
    `files`, and whatever any compare command writes there (another command's plots, the logs in logs/ and the
    traces in traces/, a scale
    sweep's comm_n*/), so that the directory holds this run's files and nothing its records do not account for.
    Files compare does not write are left alone."""
    for f in dict.fromkeys(files + WRITTEN):
        (out / f).unlink(missing_ok=True)
    for logs in (out / "logs", out / "traces"):
        if logs.is_dir() and not logs.is_symlink():
            for f in logs.iterdir():
                if f.is_file() or f.is_symlink():
                    f.unlink(missing_ok=True)
    for d in out.glob("comm_n*"):
        if d.is_dir() and not d.is_symlink() and any((d / f).is_file() for f in RESULT_FILES[:2]):
            shutil.rmtree(d)


def scratch_dir(within: Path | None = None) -> Path:
    """A private temporary directory for the ranks' files (named with our pid), after removing any left behind
    by a compare process that no longer exists (one killed with SIGKILL cannot clean up after itself). `within`:
    hidden in that directory instead of the temp directory (ranks on other hosts must see it: a results
    directory on a shared filesystem, where every host's /tmp is its own)."""
    tmp = Path(tempfile.gettempdir()) if within is None else within
    pattern = "compare-*-scratch-*" if within is None else ".compare-*-scratch-*"
    for old in tmp.glob(pattern):
        pid = old.name.lstrip(".").split("-")[1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    prefix = f"compare-{os.getpid()}-scratch-" if within is None else f".compare-{os.getpid()}-scratch-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=within))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
