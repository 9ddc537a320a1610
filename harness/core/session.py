"""One results directory while a command writes it: claimed, records saved after every launch, the report last.

Runs in: the parent. `compare run` and `compare comm` (and every later mode) write through a Session, so the
rules hold for all of them:
- the directory is claimed with a lock for the whole run (a second run on it is refused, naming this one's pid);
- the ranks write into a private scratch directory (in the temp directory, or, when ranks run on other hosts,
  hidden in the results directory, which every host must see at the same path); `records.jsonl` is rewritten
  atomically after every launch;
- records are written before the report and plots; a failure to write either is one line and exit code 1, with
  every finished row still on disk (or, if even records.jsonl cannot be written, the line says where the rank
  results were kept); otherwise the scratch directory is removed;
- each launch's log is kept in logs/: as plain text (`ddp-r0.log`) where the launch did not end cleanly (failed,
  timeout, interrupted, or ok with a shutdown_error or a failed part), gzip-compressed (`ddp-r0.log.gz`) where it did. So
  `ls logs/` shows at once which launches of a long sweep went wrong, and those open in `less` as they are (a
  row's reason points there: "the Python stacks ... are in the log"). A clean launch's log is compressed, not
  dropped: it is the only copy of what its framework printed (a warning, a stale JIT lock removed, the launcher's
  own lines), which a row that later looks odd is checked against, and no later run makes it again. On CPU such
  a log is small (empty for ddp, spawn and horovod; DeepSpeed's launcher lines 1.8 kB, 0.7 kB compressed); what
  grows is a framework's chatter (a warning per step, NCCL_DEBUG=INFO on GPUs), and text that repeats itself
  compresses about tenfold (a GPU lease's 97 kB apex build log: 8 kB). No report links to a log, and logs/ is
  never committed (.gitignore): a record's `log_tail` holds the end of every log that went wrong.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harness.ground import outdir, record
from harness.launching import machine
from harness.shared.step_parts import busy

if TYPE_CHECKING:
    from harness.launching.outcome import Outcome

Render = Callable[[Path, list[dict[str, Any]]], Any]
"""What writes a results directory's report and plots from its records (the command's: harness/reports.render)."""


class SessionError(Exception):
    """Writing the results failed after the run (a full disk, say): one line for the user, exit code 1. Not a
    BadInput: the request was sound and ran, and exit 2 would tell a script that nothing had run."""


class Session:
    def __init__(self, out: Path, files: tuple[str, ...], shared_scratch: bool = False):
        self.out, self.files, self.shared_scratch = out, files, shared_scratch
        self.records: list[dict[str, Any]] = []
        self.claim: outdir.Claim | None = None
        self.registration: machine.Registration | None = None
        self.scratch: Path | None = None
        self.kept: Path | None = None
        """Where the rank results were kept once records.jsonl could not be written."""

    def __enter__(self) -> Session:
        made = outdir.first_missing(self.out)  # what this run creates, removed again if it cannot start here
        try:
            self.claim = outdir.Claim(self.out)  # BadInput if another run holds it
            self.registration = machine.Registration(self.out)  # other runs can see that this one measures
            outdir.clear(self.out, self.files)
            (self.out / "logs").mkdir(exist_ok=True)
            # Absolute: commands on other hosts start in the repository, not in our working directory.
            self.scratch = outdir.scratch_dir(self.out.resolve() if self.shared_scratch else None)
        except OSError as exc:
            self.close()
            outdir.remove_empty(self.out, made)
            raise SessionError(f"could not prepare {self.out}: {exc.strerror or exc}") from None
        except BaseException:
            self.close()
            outdir.remove_empty(self.out, made)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # after finish() this does nothing; after an error it frees the directory and the scratch

    @property
    def records_path(self) -> Path:
        return self.out / "records.jsonl"

    def save(self, new: list[dict[str, Any]] = ()) -> None:
        """Add `new` records and rewrite records.jsonl (SessionError if it cannot be written)."""
        self.records += list(new)
        if not self.records:
            return
        try:
            record.write_records(self.records_path, self.records)
        except OSError as exc:
            kept, self.scratch = self.scratch, None  # the rank files may be all there is: never remove them now
            if kept is None:  # a second failure (a launch finishing after the first): the same place
                kept = self.kept
            else:
                # renamed out of the pattern that later runs clean up (harness/ground/outdir.py: scratch_dir)
                named = kept.with_name(kept.name.replace("-scratch-", "-kept-"))
                try:
                    kept = kept.rename(named)
                except OSError:
                    pass
            self.kept = kept
            failed = f"could not write {self.records_path}: {exc.strerror or exc}"
            try:  # the records made so far beside them (the temp directory is often another filesystem), so that
                # `compare report` renders every finished row; the raw rank files alone had no reader
                record.write_records(kept / "records.jsonl", self.records)
            except OSError:
                raise SessionError(f"{failed}; the rank results are kept in {kept}") from None
            raise SessionError(f"{failed}; the {len(self.records)} record(s) made so far are in {kept}/records.jsonl "
                               f"(`compare report {kept}` renders them), beside the rank results") from None

    def keep_log(self, outcome: Outcome, name: str) -> None:
        """Keep a launch's log in logs/ as `name`, or as `name`.gz where the launch ended cleanly (ok, with no
        shutdown_error and no failed part): see the module docstring. Best effort: a full disk must not cost the row."""
        clean = outcome.status == "ok" and not outcome.shutdown_error and not outcome.failed_parts
        dest = self.out / "logs" / (f"{name}.gz" if clean else name)
        try:
            with open(outcome.log_path, "rb") as src, (gzip.open if clean else open)(dest, "wb") as kept:
                shutil.copyfileobj(src, kept)
        except OSError as exc:
            # A cut-off copy would pass for the whole log (and a cut-off .gz does not even open): none is better, and
            # the record says so (a failed row's log is the one its reader wants)
            with contextlib.suppress(OSError):
                dest.unlink(missing_ok=True)
            if Path(outcome.log_path).exists():  # a launch that never started has no log to keep
                outcome.log_not_kept = f"logs/{dest.name} could not be written ({exc.strerror or exc})"

    def keep_traces(self, rec: dict, name: str) -> None:
        """Move a launch's profiler traces (rank 0's and the slowest other rank's) into traces/ as
        `name`-rank<k>.trace.json.gz and point the record's breakdown at them (paths relative to the results);
        the other ranks' are left in the scratch directory. Best effort: a full disk must not cost the row."""
        b = rec.get("breakdown") or {}
        traces = {int(k): v for k, v in (b.get("traces") or {}).items()}
        if not traces:
            return
        others = [k for k in traces if k != 0]
        keep = ([0] if 0 in traces else []) + ([max(others, key=lambda k: busy(b["ranks"][k]))] if others else [])
        kept = {}
        for rank in keep:
            dest = self.out / "traces" / f"{name}-rank{rank}.trace.json.gz"
            try:
                dest.parent.mkdir(exist_ok=True)
                shutil.copyfile(traces[rank], dest)
                kept[str(rank)] = dest.relative_to(self.out).as_posix()
            except OSError:
                with contextlib.suppress(OSError):
                    dest.unlink(missing_ok=True)
        b["traces"] = kept

    def finish(self, render: Render | None) -> None:
        """Write the records, then the report (None: no report); release the directory. SessionError (exit 1) names
        what failed."""
        try:
            if not self.records:
                return
            self.save()
            if render is None:
                return
            try:
                render(self.out, self.records)
            except OSError as exc:
                raise SessionError(f"could not write the report and plots in {self.out}: {exc.strerror or exc}; "
                                   f"records.jsonl holds every finished row ({len(self.records)} records)") from None
        finally:
            self.close()

    def close(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        if self.registration is not None:
            self.registration.release()
            self.registration = None
        if self.claim is not None:
            self.claim.release()
            self.claim = None
