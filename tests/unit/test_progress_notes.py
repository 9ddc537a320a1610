"""An adapter's word on a slow set-up (DeepSpeed's one-time JIT build: ~35-65 s on 2 cores) reaches a user who has
no terminal: the rank sends it as a note event beside the live phase, the launch hands the notes to the progress
display, and without a live line the display prints each once (CI logs and pipes used to show ~30 s of silence
after "launching")."""

import io

from rich.console import Console

from adapters.base import LaunchPlan
from harness.launching.launch import Launch
from harness.shared import progress as progress_file
from harness.shared.spec import RunSpec


class _Silent:
    """An adapter whose one command runs and says nothing (the notes below are sent by the test, as ranks would)."""

    name = "x"
    launcher = "sleep"

    def launch(self, spec_path, spec):
        return LaunchPlan(argv=["sleep", "3600"])

    def processes(self, world_size):
        return world_size


def test_a_note_sent_by_ranks_reaches_the_display_once(tmp_path):
    spec = RunSpec(adapter="x", workload="digits", world_size=2, device="cpu", global_batch=64, steps=10, warmup=2,
                   threads=1, rank_dir=str(tmp_path))
    seen = []

    def display(pr):
        seen.append(pr)
        progress_file.send_event(tmp_path, "timed_done")  # rank 0's word that ends the wait, after the first redraw

    launch = Launch(_Silent(), spec, timeout_s=900, on_progress=display).start()
    try:
        progress_file.Writer(spec.progress_path).phase("first run: JIT-compiling deepspeed_shm_comm")
        for rank in range(2):  # every rank says it: the note is one
            progress_file.send_event(tmp_path, progress_file.NOTE + "first run: JIT-compiling deepspeed_shm_comm")
        # The notes are read at once; the display is redrawn a UI interval (1 s) later, with them.
        assert launch.wait_for("timed_done") is True
    finally:
        launch.interrupt()
    assert [(pr["phase"], pr["notes"]) for pr in seen] == [
        ("first run: JIT-compiling deepspeed_shm_comm", ["first run: JIT-compiling deepspeed_shm_comm"])]


def test_without_a_terminal_each_note_is_printed_once_per_launch(monkeypatch):
    from harness.commands import ui as uimod

    out = io.StringIO()
    monkeypatch.setattr(uimod, "console", Console(file=out, force_terminal=False, width=150))
    ui = uimod.RunUI()
    assert ui.bar is None
    note = {"phase": "setup", "step": 0, "total": 12, "notes": ["first run: JIT-compiling deepspeed_shm_comm"]}
    for _ in range(3):  # redrawn every second while the build runs
        ui.progress("deepspeed", 0, note)
    ui.progress("deepspeed", 1, note)  # a second launch that builds again says so again
    ui.progress("ddp", 0, {"phase": "timed", "step": 3, "total": 12, "notes": []})
    assert out.getvalue().splitlines() == [
        "  deepspeed: first run: JIT-compiling deepspeed_shm_comm",
        "  deepspeed (repeat 1): first run: JIT-compiling deepspeed_shm_comm",  # records number from 0
    ]
