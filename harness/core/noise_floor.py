"""`compare doctor`: how noisy this machine is for a comparison, and what precision is reachable in what time.

Runs in: the parent. Like pyperf's `system show`, it first reads what the machine is doing (load, steal and other
processes' CPU over a short sample of /proc/stat, CPU frequency where readable, other compare runs); then, since the
variance that matters is between launches, it launches one row a few times (a real `compare run` into a temporary
directory, removed afterwards) and turns the launch-to-launch variation into the interval a ratio of two rows would
get at each number of launches, and the launches (and time) a target precision needs here.

    compare doctor                       # 5 launches of ddp on digits
    compare doctor --launches 8 -a horovod -w widemlp
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.ground.errors import BadInput
from harness.core.design import DESIGN_BOUNDS, best_steps, buys, components, store_components  # noqa: F401
from harness.ground.stats import CONFIDENCE, geomean_interval, log_moments, t_quantile

LAUNCH_COUNTS = (3, 5, 10, 20, 40, 80)
TARGETS = (0.10, 0.05, 0.02)
MIN_LAUNCHES = 3
MAX_LAUNCHES = 50


def sample_machine(seconds: float = 2.0, stat_path: str = "/proc/stat") -> dict[str, Any]:
    """Load average, and over `seconds`: the share of the CPUs' time stolen and busy (nothing of ours runs then, so
    busy is other processes); CPU frequency and governor where /sys shows them; other compare runs."""
    from harness.launching import machine
    from harness.shared import procstat

    out: dict[str, Any] = {"cores": os.cpu_count(), "sample_s": seconds}
    try:
        out["load_avg"] = list(os.getloadavg())
    except OSError:
        out["load_avg"] = None
    before = procstat.read(stat_path)
    time.sleep(seconds)  # a measurement window, not synchronisation
    after = procstat.read(stat_path)
    window = procstat.shares([b - a for a, b in zip(before, after)]) if before and after else None
    if window:
        out["steal_share"], out["busy_share"] = window["steal"], window["busy"]
    freqs, governors = [], set()
    for cpu in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq")):
        try:
            freqs.append(int((cpu / "scaling_cur_freq").read_text()) / 1e6)
            governors.add((cpu / "scaling_governor").read_text().strip())
        except (OSError, ValueError):
            continue
    out["cpu_ghz"] = freqs or None
    out["governors"] = sorted(governors) or None
    out["other_compare_runs"] = machine.others()
    return out


def ratio_half_width(sd_log: float, n: int) -> float:
    """The relative half-width of a 95% Welch interval on the ratio of two rows of `n` launches each, when both have
    launch-to-launch variation `sd_log` (standard deviation of log samples/s): sinh(t(2n-2) x sd x sqrt(2/n)), the
    same measure as harness/ground/stats.py half_width."""
    return math.sinh(t_quantile(0.5 + CONFIDENCE / 2, 2 * n - 2) * sd_log * math.sqrt(2.0 / n))


def launches_for(target: float, sd_log: float, most: int = 1000) -> int | None:
    """The fewest launches per row (>= 3) whose ratio interval reaches `target`; None if more than `most`."""
    for n in range(MIN_LAUNCHES, most + 1):
        if ratio_half_width(sd_log, n) <= target:
            return n
    return None


def noise_floor(records: list[dict[str, Any]]) -> dict[str, Any]:
    """From the doctor's launches: per-launch samples/s, their geometric mean with its interval, the variation, the
    seconds per launch, and what that makes reachable."""
    ok = [r for r in records if r["status"] == "ok" and r.get("samples_per_s")]
    if len(ok) < MIN_LAUNCHES:
        bad = [f"{r['status']}: {r.get('reason', '')}" for r in records if r["status"] != "ok"]
        raise RuntimeError(f"only {len(ok)} of {len(records)} launches measured" + (f" ({bad[0]})" if bad else ""))
    sps = [r["samples_per_s"] for r in ok]
    sd = math.sqrt(log_moments(sps)[1])  # the same log scale the verdict's intervals use
    launch_s = sum(r["wall_time_s"] for r in ok) / len(ok)
    flagged = [r["repeat"] for r in ok if (r.get("noise") or {}).get("flags")]
    from harness.core import joins

    comp = components(ok)
    return {"samples_per_s": sps, "interval": geomean_interval(sps), "sd_log": sd, "launch_s": launch_s,
            "components": comp, "sessions": joins.known(joins.env_of(ok), ok[0]["workload"],
                                                          ok[0]["controls"].get("workload_options"),
                                                          joins.request_of(ok)),
            "flagged": flagged, "label": ok[0]["label"], "workload": ok[0]["workload"],
            "steps": ok[0]["controls"]["steps"],
            "reachable": [{"launches": n, "half_width": ratio_half_width(sd, n), "seconds_per_row": n * launch_s}
                          for n in LAUNCH_COUNTS],
            "needed": {t: launches_for(t, sd) for t in TARGETS}}


def plan(adapter: str, workload: str, launches: int, steps: int | None):
    """The doctor's launches as a `compare run` plan (checked as `compare run` checks it: BadInput), into a temporary
    directory; returns (plan, that directory)."""
    from harness.core import comparison as runmod
    from harness.core.requests import RunRequest

    if not MIN_LAUNCHES <= launches <= MAX_LAUNCHES:
        raise BadInput(f"--launches must be between {MIN_LAUNCHES} (an interval needs {MIN_LAUNCHES}) and "
                       f"{MAX_LAUNCHES}, got {launches}")
    scratch = Path(tempfile.mkdtemp(prefix="compare-doctor-"))
    try:
        req = RunRequest(adapters=[adapter], workload=workload, repeats=launches, steps=steps, equiv_steps=0,
                         out=scratch / "run", strict=True, command=f"compare doctor ({adapter} x {launches})")
        return runmod.plan(req), scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def measure(planned, scratch: Path, ui) -> list[dict[str, Any]]:
    """Run the planned launches through the same runner as `compare run`; the directory is removed afterwards."""
    from harness.core import comparison as runmod

    try:
        records, _ = runmod.execute(planned, ui)
        return records
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def lines(machine: dict[str, Any], floor: dict[str, Any] | None) -> list[str]:
    """What `compare doctor` prints (plain text; the CLI adds colour)."""
    load = machine.get("load_avg")
    out = [f"machine: {machine['cores']} CPUs; load average "
           + (" ".join(f"{x:.2f}" for x in load) if load else "not readable")
           + (f"; over {machine['sample_s']:g} s idle: steal {machine['steal_share']:.1%}, other processes busy "
              f"{machine['busy_share']:.1%} of the CPUs" if "steal_share" in machine else "; /proc/stat not readable")]
    freq = machine.get("cpu_ghz")
    out.append("CPU frequency: " + (f"{min(freq):.2f}–{max(freq):.2f} GHz, governor {', '.join(machine['governors'] or ['?'])}"
                                    if freq else "not readable here (a VM usually hides it)"))
    others = machine.get("other_compare_runs") or []
    out.append("other compare runs: " + (", ".join(f"pid {o['pid']}" for o in others) if others else "none"))
    if floor is None:
        return out
    iv = floor["interval"]
    out += [f"{len(floor['samples_per_s'])} launches of {floor['label']} on {floor['workload']} ({floor['steps']} timed "
            f"steps each), {floor['launch_s']:.1f} s per launch: samples/s "
            + ", ".join(f"{v:,.0f}" for v in floor["samples_per_s"])
            + f"; geometric mean {iv['estimate']:,.0f} [{iv['lo']:,.0f}–{iv['hi']:,.0f}]",
            f"launch-to-launch variation (standard deviation of log samples/s): {floor['sd_log']:.1%}"
            + (f"; launches flagged for interference: {', '.join(str(k + 1) for k in floor['flagged'])}"
               if floor["flagged"] else ""),
            "the ratio of two rows with this variation, 95% Welch interval:",
            "  launches per row   ± half-width   time per row"]
    for r in floor["reachable"]:
        out.append(f"  {r['launches']:>17}   ±{r['half_width']:>10.1%}   {r['seconds_per_row'] / 60:>9.1f} min")
    need = "; ".join(f"±{t:.0%}: {'more than 1000' if n is None else n} launches per row" +
                     ("" if n is None else f" (~{n * floor['launch_s'] / 60:.0f} min per row)")
                     for t, n in floor["needed"].items())
    out.append(f"to resolve a ratio here: {need}. A comparison of R rows takes about R times as long; "
               f"`compare run --precision P --budget T` sizes its rounds for every pair.")
    return out + component_lines(floor)


def component_lines(floor: dict[str, Any]) -> list[str]:
    """The variance at each level of repetition, what more of each buys, and the design a default run takes."""
    comp, known = floor.get("components"), floor.get("sessions")
    if comp is None:
        return ["variance components: too few steps per launch to cut each into windows"]
    buy = buys(comp)
    return [
        "variance components of log samples/s (standard deviations):",
        f"  within a launch, between windows of {comp['window_steps']} steps: {math.sqrt(comp['window_var']):.1%} "
        f"({math.sqrt(comp['v'] / comp['steps']):.1%} for a launch of {comp['steps']} steps)",
        f"  between launches, beyond that: {math.sqrt(comp['launch_var']):.1%}",
        "  between sessions (runs at other times): " + (
            f"{known['tau_median']:.1%} for a pair's log ratio (median over {known['pairs']} pairs of "
            f"{known['sessions']} joined runs of {known['workload']}, {known['date']})" if known else
            "not known here yet (join runs of one request: `compare run --join DIR`)"),
        f"what more of each buys for a pair's interval within one run: twice the steps per launch "
        f"(+{comp['steps'] * comp['step_s']:.1f} s a launch) {buy['steps']:.0%} narrower; twice the launches "
        f"{buy['launches']:.0%} narrower; for runs at other times, no number of launches narrows the between-session "
        + (f"part (a pair's ratio moves by about ±{1.96 * known['tau_median']:.0%} between runs here): only more "
           f"sessions do, as 1/sqrt(sessions)" if known else "part: only more sessions do"),
        (f"a default `compare run` of {comp['workload']} here now chooses its steps per launch from these, its rows' "
         f"last launches here and its budget: those whose rounds give a pair the narrowest t interval, among those "
         f"whose 3 rounds fit the budget (its report says which, and why); for this row alone with no budget, "
         f"{best_steps(comp, comp['steps'])} (sqrt(v c0 / (sigma_L^2 t)) for a launch's fixed {comp['fixed_s']:.1f} s "
         f"and {comp['step_s'] * 1e3:.2f} ms a step, within {DESIGN_BOUNDS[0]:g}-{DESIGN_BOUNDS[1]:g}x its "
         f"{comp['steps']})" if floor.get("kept") else
         f"(not kept for default runs' design: the cache directory {floor['not_kept']} cannot be written; set "
         f"COMPARE_CACHE to a writable directory)" if floor.get("not_kept") else
         "(measured at --steps, not the workload's own: not kept for default runs' design)")]
