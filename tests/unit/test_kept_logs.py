"""Which launch logs a run keeps in logs/, and how (harness/core/session.py): plain text where a launch did not end
cleanly, gzip-compressed where it did, nothing where there is no whole copy to keep."""

import gzip
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.core.session import Session


def _session(tmp_path: Path) -> Session:
    # Not entered: entering claims the directory and registers a measuring run on this machine, which other runs
    # (another session's tests) would see; keep_log needs only logs/.
    session = Session(tmp_path / "out", ("records.jsonl",))
    (session.out / "logs").mkdir(parents=True)
    return session


def _outcome(tmp_path: Path, status: str, shutdown_error: str = "", text: str | None = "rank 0: step 1\n",
             failed_parts: dict | None = None):
    log = tmp_path / f"launch-{status}-{bool(shutdown_error)}.log"
    if text is not None:
        log.write_text(text)
    return SimpleNamespace(status=status, shutdown_error=shutdown_error, log_path=log, failed_parts=failed_parts or {})


@pytest.mark.parametrize("status, shutdown_error, failed_parts", [
    ("failed", "", None), ("timeout", "", None), ("interrupted", "", None),
    ("ok", "after every rank had written its result: exit 1", None),
    ("ok", "", {"breakdown": "stalled: no progress for 20 s (--stall-timeout)"})])
def test_a_launch_that_went_wrong_keeps_its_log_as_plain_text(tmp_path, status, shutdown_error, failed_parts):
    session = _session(tmp_path)
    session.keep_log(_outcome(tmp_path, status, shutdown_error, failed_parts=failed_parts), "ddp-r0.log")
    assert sorted(p.name for p in (session.out / "logs").iterdir()) == ["ddp-r0.log"]
    assert (session.out / "logs" / "ddp-r0.log").read_text() == "rank 0: step 1\n"


def test_a_clean_launch_keeps_its_whole_log_compressed(tmp_path):
    session = _session(tmp_path)
    text = "".join(f"[W] a warning the framework prints at step {i}\n" for i in range(2000))
    session.keep_log(_outcome(tmp_path, "ok", text=text), "deepspeed-r0.log")
    kept = session.out / "logs" / "deepspeed-r0.log.gz"
    assert sorted(p.name for p in (session.out / "logs").iterdir()) == [kept.name]
    assert gzip.decompress(kept.read_bytes()).decode() == text
    assert kept.stat().st_size * 10 < len(text)


@pytest.mark.parametrize("status", ["ok", "failed"])
def test_a_log_that_cannot_be_copied_leaves_no_file_and_no_error(tmp_path, status):
    # A launch that never started has no log; a full disk cuts a copy short. Neither may cost the row, and no
    # file may pass for a whole log.
    session = _session(tmp_path)
    outcome = _outcome(tmp_path, status, text=None)
    session.keep_log(outcome, "ddp-r0.log")
    assert list((session.out / "logs").iterdir()) == [] and not hasattr(outcome, "log_not_kept")


@pytest.mark.parametrize("status", ["ok", "failed"])
def test_a_copy_cut_short_by_a_full_disk_is_removed(tmp_path, monkeypatch, status):
    import errno
    import shutil

    def full(src, dst, *args, **kwargs):
        dst.write(src.read(4))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", full)
    session = _session(tmp_path)
    outcome = _outcome(tmp_path, status)
    session.keep_log(outcome, "ddp-r0.log")
    assert list((session.out / "logs").iterdir()) == []
    # and the record says so (an outside check: a failed row's 10 MB log went missing on a full disk, unsaid)
    name = "ddp-r0.log.gz" if status == "ok" else "ddp-r0.log"
    assert outcome.log_not_kept == f"logs/{name} could not be written (No space left on device)"


def test_a_run_that_cannot_start_writing_leaves_no_empty_directory(tmp_path, monkeypatch):
    # the disk filled between the check of its room and the run's first file: the directories it made go again
    import errno

    from harness.ground import outdir
    from harness.core.session import SessionError

    def full(within=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outdir, "scratch_dir", full)
    out = tmp_path / "results" / "run"
    with pytest.raises(SessionError, match="could not prepare .*: No space left on device"):
        with Session(out, ("records.jsonl",)):
            pass
    assert not (tmp_path / "results").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    with pytest.raises(SessionError):
        with Session(mine / "run", ("records.jsonl",)):
            pass
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]  # only what the run made is removed
