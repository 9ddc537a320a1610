"""Progress as a command shows it: one live line per launch on a terminal, printed lines elsewhere.

Runs in: the parent.
"""

from __future__ import annotations

from rich.markup import escape

from harness.commands.common import console, tuning_note, where
from harness.ground.errors import first_sentence
from harness.core.estimate import duration


class RunUI:
    """Progress of a run: on a terminal one live line per launch (phase, step), redrawn at most once a second and
    only when it changed; elsewhere (CI logs, pipes) one printed line when a launch starts and one when it ends."""

    def __init__(self):
        self.live = console.is_terminal
        self.tasks: dict[tuple[str, int], int] = {}
        self.said: dict[tuple[str, int], set[str]] = {}
        self.bar = None
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description:<18}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                                TextColumn("{task.fields[phase]}"), TimeElapsedColumn(),
                                TextColumn("{task.fields[left]}"), console=console, transient=False,
                                auto_refresh=False)

    def header(self, plan) -> str:
        req = plan.request
        names = ", ".join(r.label for r in plan.runnable)
        over = " (oversubscribed: more processes than cores)" if plan.oversubscribed else ""
        until = plan.until_target
        length = (f"{plan.warmup} warm-up + {plan.steps} timed steps" if until is None else
                  f"until {until.metric} ≥ {until.target:g} (evaluated every {until.eval_every} steps, at most "
                  f"{until.max_steps} steps; launches one at a time)")
        return (f"[bold]compare run[/]: workload [bold]{req.workload}[/], world size {req.world_size}"
                f"{where(plan)}{over}, device {req.device}, adapters {escape(names)}; {length}, "
                + (f"{req.repeats} repeat(s)" if plan.budget_s is None else "rounds as below") + f" -> {plan.out}")

    def start(self, plan):
        console.print(self.header(plan))
        tuning_note()
        for row in plan.unavailable:
            console.print(f"  [yellow]{escape(row.label)}: unavailable[/] - {escape(first_sentence(row.reason))}")
        if self.bar:
            self.bar.start()

    def _label(self, name, repeat):
        return name if repeat == 0 else f"{name} (repeat {repeat})"  # as its record and log (NAME-rREPEAT) number it

    def estimate(self, line: str) -> None:
        """What the run will cost (harness/core/estimate.py): before the first launch, and once a first figure is in."""
        console.print(f"  {escape(line)}")  # the live display's console too: printed above it

    def begin(self, name, repeat, total, left=None):
        """A launch starts; `left`: the seconds the run's launches not yet ended should take, where known."""
        left_text = "" if left is None else f"(run: about {duration(left)} left)"
        if self.bar:  # each launch's line keeps what was left of the run when it began
            self.tasks[(name, repeat)] = self.bar.add_task(self._label(name, repeat), total=total, phase="launching",
                                                           left=left_text)
            self.bar.refresh()
        else:
            console.print(f"  {escape(self._label(name, repeat))}: launching" + (f" {left_text}" if left_text else ""))

    def progress(self, name, repeat, pr):
        if self.bar:
            self.bar.update(self.tasks[(name, repeat)], completed=pr.get("step", 0), phase=escape(pr.get("phase", "")))
            self.bar.refresh()
            return
        said = self.said.setdefault((name, repeat), set())
        for note in pr.get("notes", []):  # an adapter's word on a slow set-up: no live line here to show it
            if note not in said:
                said.add(note)
                console.print(f"  {escape(self._label(name, repeat))}: {escape(note)}")

    def _done(self, name, repeat, text, complete):
        if self.bar:
            task = self.tasks[(name, repeat)]
            self.bar.update(task, phase=text, **({"completed": self.bar.tasks[task].total} if complete else {}))
            self.bar.refresh()
        else:
            console.print(f"  {escape(self._label(name, repeat))}: {text}")

    def reference_done(self, outcome, name="reference"):
        if outcome.status == "ok":
            self._done(name, 0, "[green]reference ok[/]", True)
        else:
            self._done(name, 0, f"[red]{outcome.status}[/]: {escape(outcome.reason)} (max_param_diff will "
                                f"be empty)", False)

    def finished(self, rec, name=None):
        name = rec["label"] if name is None else name
        ttt = rec.get("ttt")
        if rec["status"] == "ok" and ttt:
            self._done(name, rec["repeat"], f"[green]target[/] at step {ttt['steps_to_target']}: "
                                            f"{ttt['train_time_to_target_s']:.2f} s training, "
                                            f"{ttt['e2e_time_to_target_s']:.2f} s end to end", True)
        elif rec["status"] == "ok":
            ended = (f" [yellow](the launch then ended badly {escape(rec['shutdown_error'])}; the measurements are "
                     f"kept)[/]" if rec.get("shutdown_error") else "")
            ended += "".join(f" [yellow](its {part} did not finish: {escape(why)}; the measurement is kept)[/]"
                             for part, why in (rec.get("failed_parts") or {}).items())
            self._done(name, rec["repeat"], f"[green]ok[/] {rec['samples_per_s']:,.0f} samples/s{ended}", True)
        elif rec["status"] == "not_reached":
            self._done(name, rec["repeat"], f"[yellow]not reached[/]: {escape(rec['reason'])}", True)
        else:
            self._done(name, rec["repeat"], f"[red]{rec['status']}[/]: {escape(rec['reason'])}", False)

    def round_done(self, k: int, analysis, target: float | None) -> None:
        """After each round: the table so far (rows by estimate, their intervals and letter groups once every row
        has 3 launches) and the widest simultaneous interval over the pairs, against --precision's target."""
        from rich.table import Table

        from harness.reports.run_report import widest_text
        from harness.reports.verdict import interval_text

        letters = analysis["letters"] or {}
        table = Table(title=f"after round {k}", title_justify="left", box=None, pad_edge=False)
        for name, right in (("row", False), ("samples/s [95% interval]", True), ("group", False)):
            table.add_column(name, justify="right" if right else "left")
        for label in analysis["order"]:
            table.add_row(escape(label), interval_text(analysis["rows"][label]), letters.get(label, ""))
        widest = analysis["widest"]
        now = ("no interval yet (fewer than 3 launches per row)" if widest is None else
               f"widest simultaneous interval over the pairs ±{widest[1]:.1%} ({escape(widest[0])})"
               if widest[1] <= 1 else  # past ±100% a half-width says nothing of a ratio: the interval itself
               f"widest simultaneous interval over the pairs: {escape(widest_text(widest, analysis))}")
        console.print(table)
        console.print(f"  {now}" + ("" if target is None else f"; target ±{target * 100:g}%"))

    def stop(self):
        if self.bar and self.bar.live.is_started:
            self.bar.stop()


class TuneUI(RunUI):
    def _label(self, name, repeat):  # a tune's rounds run on across its two stages
        return f"{name} (round {repeat + 1})"

    def header(self, plan) -> str:
        req = plan.request
        return (f"[bold]compare tune[/]: workload [bold]{req.workload}[/], world size {req.world_size}{where(plan)}, "
                f"device {req.device}; {plan.warmup} warm-up + {plan.steps} timed steps a launch -> {plan.out}")

    def start(self, plan):
        console.print(self.header(plan))
        tuning_note()
        if self.bar:
            self.bar.start()


class ScaleUI(RunUI):
    def header(self, plan) -> str:
        req, first = plan.request, plan.points[0]
        names = ", ".join(r.label for r in first.runnable)
        over = [p.request.world_size for p in plan.points if p.oversubscribed]
        over_text = f" (oversubscribed: {', '.join(map(str, over))})" if over else ""
        straggler = (f"; straggler: rank {plan.straggler['rank']} x{plan.straggler['factor']:g}"
                     if plan.straggler else "")
        return (f"[bold]compare scale[/]: workload [bold]{req.workload}[/], {plan.scaling} scaling at world sizes "
                f"{','.join(map(str, plan.world_sizes))}{over_text} with {plan.threads} thread(s) per rank, device "
                f"{req.device}, adapters {escape(names)} + the single-process baseline; {first.warmup} warm-up + "
                f"{first.steps} timed steps, {req.repeats} repeat(s){straggler} -> {plan.out}")


class QuietUI(RunUI):
    """Progress for nobody (`--json` prints only the JSON)."""

    def __init__(self):
        self.live, self.tasks, self.bar = False, {}, None

    def start(self, plan):
        pass

    def estimate(self, line):
        pass

    def begin(self, name, repeat, total, left=None):
        pass

    def _done(self, name, repeat, text, complete):
        pass

    def round_done(self, k, analysis, target):
        pass
