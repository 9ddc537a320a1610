"""`compare diff RUN_A RUN_B`: per-row ratios of two runs against hand-computed values, the outcomes, and bad input
as one line and exit 2 with nothing written."""

import json
import math
import random
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.reports import run_diff as diff


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "digits_cpu2_20261126-045209"


def _run(tmp_path, name, values, workload="digits", world_size=2, batch=None, torch=None):
    """A run directory whose records are a committed run's (every field a real run writes), with these per-launch
    samples/s per row and, where given, another workload, world size, global batch or torch."""
    from harness.ground.record import read_records

    template = {r["label"]: r for r in read_records(FIXTURE / "records.jsonl.gz")}
    d = tmp_path / name
    d.mkdir()
    recs = []
    for label, vs in values.items():
        for k, v in enumerate(vs):
            r = json.loads(json.dumps(template[label]))
            # each run its own launches, as no two runs share a start time (a copy does: harness/core/joins.py)
            r.update(repeat=k, samples_per_s=v, workload=workload, world_size=world_size, run_id=name,
                     launch_wall=r["launch_wall"] + zlib.crc32(name.encode()) % 10**6 * 1e-6)
            if batch is not None:
                r["controls"]["global_batch"] = batch
            if torch is not None:
                r["env"]["torch"] = torch
            recs.append(r)
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def test_each_row_is_b_over_a_with_welchs_interval_and_holms_outcome():
    # ddp: A's logs 0, 0.1, 0.2 (x 100), B's 0.5, 0.6, 0.7: B / A = e^0.5 = 1.6487 with Welch's df 4 and
    # se = sqrt(2 x 0.01 / 3) = 0.0816497, t(0.975, 4) = 2.776445: [e^0.2733042, e^0.7266958] = [1.314300, 2.068235]
    a = {"ddp": [100 * math.exp(x) for x in (0, 0.1, 0.2)], "spawn": [100.0, 101.0, 99.0],
         "horovod": [50.0, 80.0, 65.0]}
    b = {"ddp": [100 * math.exp(x) for x in (0.5, 0.6, 0.7)], "spawn": [100.5, 100.0, 99.5],
         "horovod": [60.0, 45.0, 75.0], "fsdp": [10.0, 11.0, 12.0]}
    d = diff.compare([*_records(a)], [*_records(b, torch="2.14.0")])
    rows = {r["label"]: r for r in d["rows"]}
    assert rows["ddp"]["estimate"] == pytest.approx(math.exp(0.5))
    assert rows["ddp"]["lo"] == pytest.approx(1.314300, abs=1e-6)
    assert rows["ddp"]["hi"] == pytest.approx(2.068235, abs=1e-6)
    assert rows["ddp"]["outcome"] == "faster in B"
    assert rows["spawn"]["outcome"] == "equivalent"  # within 1% of each other, both tight
    assert rows["horovod"]["outcome"] == "not resolved"
    assert d["only_b"] == ["fsdp"] and d["context"] == [("torch", "2.13.0", "2.14.0")]
    text = "\n".join(diff.lines(d))
    # the rows' own intervals: A e^(0.1 -+ 0.2484138) x 100 = [86, 142], B e^(0.6 -+ 0.2484138) x 100 = [142, 234]
    assert "| ddp | 111 [86–142] | 182 [142–234] | 1.649× [1.314–2.068] | faster in B |" in text
    assert "Only measured in B: fsdp." in text and "What differs: torch 2.13.0 → 2.14.0." in text
    # one run a side: the summary of outcomes says what it holds between, as the paragraph before the table does
    assert ("Between these runs' launches alone (not runs at other times): faster in B: ddp; equivalent: spawn; not "
            "resolved: horovod.") in text


def _records(values, torch="2.13.0"):
    out = []
    for label, vs in values.items():
        for k, v in enumerate(vs):
            out.append({"kind": "run", "label": label, "status": "ok", "repeat": k, "workload": "digits",
                        "world_size": 2, "samples_per_s": v, "controls": {"global_batch": 64, "workload_options": {}},
                        "env": {"torch": torch}})
    return out


def test_compare_diff_prints_the_table_and_writes_nothing(tmp_path):
    a = _run(tmp_path, "a", {"ddp": [100.0, 101.0, 99.0]})
    b = _run(tmp_path, "b", {"ddp": [120.0, 121.0, 119.0]})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    shown = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert shown.exit_code == 0, shown.output
    assert "| ddp | 100 [98–103] | 120 [118–123] | 1.200× [1.175–1.226] | faster in B |" in shown.stdout
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_knob_or_binding_one_row_ran_under_is_said_in_what_differs():
    # an audit diffed a ddp at the default bucket size against one at --knob ddp.bucket_cap_mb=1: the table was right
    # and nothing said what had changed
    def rows(knob, bound):
        recs = _records({"ddp": [100.0, 101.0, 99.0], "spawn": [90.0, 91.0, 89.0]})
        for r in recs:
            r["controls"].update(bind_cores=bound, warmup=20,
                                 knobs={"bucket_cap_mb": knob if r["label"] == "ddp" else None})
        return recs

    d = diff.compare(rows(None, False), rows(1.0, True))
    text = "\n".join(diff.lines(d))
    assert ("What differs: ddp's cores bound False → True; ddp's knob bucket_cap_mb default → 1.0; spawn's cores "
            "bound False → True.") in text, text


@pytest.mark.parametrize("make_b, args, message", [
    (lambda t: _run(t, "b", {"ddp": [1.0] * 3}, workload="widemlp"), [],
     "the runs differ in workload: A has digits, B has widemlp; compare diff compares the same rows of the same "
     "workload, world size and batch"),
    (lambda t: _run(t, "b", {"ddp": [1.0] * 3}, world_size=4), [], "the runs differ in world size: A has 2, B has 4"),
    (lambda t: _run(t, "b", {"ddp": [1.0] * 3}, batch=32), [], "the runs differ in global batch: A has 64, B has 32"),
    (lambda t: _run(t, "b", {"spawn": [1.0] * 3}), [], "no row was measured in both runs (A: ddp; B: spawn)"),
    (lambda t: t, [], " holds no records.jsonl; give a directory written by `compare run`"),
    (lambda t: t / "nowhere", [], "does not exist; give a directory written by `compare run`"),
    *[(lambda t: _run(t, "b", {"ddp": [1.0] * 3}), ["--margin", bad],
       f"--margin must be a percentage of at least 0.01% and below 100%, e.g. 5%; got '{bad}'")
      for bad in ("0", "-5%", "abc", "100%")],
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, make_b, args, message):
    a = _run(tmp_path, "a", {"ddp": [1.0, 1.1, 0.9]})
    b = make_b(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    shown = CliRunner().invoke(app, ["diff", str(a), str(b), *args])
    assert shown.exit_code == 2 and shown.stdout == ""
    assert message in shown.stderr and shown.stderr.startswith("error: ") and shown.stderr.count("\n") == 1, \
        shown.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_scale_sweep_is_not_a_run(tmp_path):
    a = _run(tmp_path, "a", {"ddp": [1.0, 1.1, 0.9]})
    sweep = FIXTURE.parent / "scale_digits_cpu2_20261125-085608"
    shown = CliRunner().invoke(app, ["diff", str(a), str(sweep)])
    assert shown.exit_code == 2
    assert shown.stderr == (f"error: {sweep} holds the results of `compare scale`; give a directory written by "
                            f"`compare run`\n")


def test_a_run_compared_with_itself_is_refused_as_one_run(tmp_path):
    # every row was "1.000x not resolved" without a word that A and B were one run
    import shutil

    a = _run(tmp_path, "a", {"ddp": [1.0, 1.1, 0.9]})
    shutil.copytree(a, tmp_path / "copy")
    (tmp_path / "link").symlink_to(a)
    for b, why in ((a, f"{a} twice"), (tmp_path / "link", f"{a} is {tmp_path / 'link'}"),
                   (tmp_path / "copy", f"{tmp_path / 'copy'} holds the same launches as {a}: a copy")):
        shown = CliRunner().invoke(app, ["diff", str(a), str(b)])
        assert (shown.exit_code, shown.stdout) == (2, "")
        assert shown.stderr == (f"error: A and B are one run ({why}): every row would be 1.000x, and that says "
                                f"nothing; give another run as B (the same command again, or another torch, knob or "
                                f"machine)\n")
    # a copy with its figures edited, or a launch left out, was diffed as another run (1.300x, "faster in B")
    lines = (a / "records.jsonl").read_text().splitlines()
    for name, text, why in (
            ("edited", "".join(json.dumps({**json.loads(x), "samples_per_s": json.loads(x)["samples_per_s"] * 1.3})
                               + "\n" for x in lines), "holds the same launches as {a} with other samples/s (3 of "
                                                       "3: its figures were edited)"),
            ("trimmed", "\n".join(lines[:2]) + "\n", "holds 2 of the 3 launches of {a}")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "records.jsonl").write_text(text)
        shown = CliRunner().invoke(app, ["diff", str(a), str(tmp_path / name)])
        assert (shown.exit_code, shown.stdout) == (2, "")
        assert shown.stderr == (f"error: A and B are one run ({tmp_path / name} {why.format(a=a)}: a copy): a diff of "
                                f"a run and a copy of it measures the copy's edit, not a change; give another run as "
                                f"B (the same command again, or another torch, knob or machine)\n")


# ---- sessions: runs at other times counted (issue 65) ---------------------------------------------------------------

def _side(rng, sessions, tau, cv, launches=5, rows=("ddp", "spawn", "horovod"), base=None, torch="2.13.0"):
    """Sessions of one condition: each row's level moves per session by N(0, tau) (the machine that day), each launch
    by N(0, cv) more; the same true speed per row on both sides."""
    base = base or {"ddp": 1000.0, "spawn": 980.0, "horovod": 700.0}
    out = []
    for s in range(sessions):
        values = {}
        for k in rows:
            shift = rng.gauss(0.0, tau)
            values[k] = [base[k] * math.exp(shift + rng.gauss(0.0, cv)) for _ in range(launches)]
        out.append((f"s{s}", _records(values, torch=torch)))
    return out


@pytest.mark.slow  # seconds: left out of make test-fast
def test_identical_conditions_with_run_to_run_variation_resolve_a_row_at_most_5_percent_of_the_time():
    # three sessions a side, a between-session SD of 5% per row and CV 5% within: the diff of the joins calls some
    # row different in at most 5% of runs (Holm over the rows); a diff of one run a side, on the same launches, calls
    # one far more often: its Welch interval leaves the between-session part out
    rng = random.Random(650)
    runs, joined, single = 1000, 0, 0
    for _ in range(runs):
        a, b = _side(rng, 3, 0.05, 0.05), _side(rng, 3, 0.05, 0.05)
        d = diff.compare(a, b)
        assert d["by_sessions"] and all(0 < r["df"] <= 4 for r in d["rows"])  # Welch's, at most kA + kB - 2
        joined += any(r["outcome"].startswith(("faster", "slower")) for r in d["rows"])
        one = diff.compare(a[0][1], b[0][1])
        single += any(r["outcome"].startswith(("faster", "slower")) for r in one["rows"])
    assert joined / runs <= 0.05, joined
    assert single / runs > 0.5, single


def test_a_diff_of_joins_is_welchs_t_over_each_sides_session_estimates():
    from harness.ground import stats

    rng = random.Random(7)
    a, b = _side(rng, 2, 0.02, 0.02), _side(rng, 3, 0.02, 0.02, base={"ddp": 1100.0, "spawn": 980.0, "horovod": 700.0})
    d = diff.compare(a, b)
    ddp = next(r for r in d["rows"] if r["label"] == "ddp")
    ea = [stats.session_estimate([r["samples_per_s"] for r in recs if r["label"] == "ddp"]) for _, recs in a]
    eb = [stats.session_estimate([r["samples_per_s"] for r in recs if r["label"] == "ddp"]) for _, recs in b]
    want = stats.random_effects_difference(ea, eb)
    assert (ddp["estimate"], ddp["lo"], ddp["hi"], ddp["df"]) == (want["estimate"], want["lo"], want["hi"], want["df"])
    # each session counted once: the means of the two sides' session estimates, Welch's t over them
    mean_a, mean_b = (sum(y for y, _ in e) / len(e) for e in (ea, eb))
    assert ddp["estimate"] == pytest.approx(math.exp(mean_b - mean_a), rel=1e-12) and 1 <= want["df"] <= 3
    text = "\n".join(diff.lines(d))
    assert text.startswith("B against A: digits, world size 2; 2 sessions of A against 3 of B: per row each session's "
                           "log geometric mean, counted once, B's against A's by Welch's 95% t interval")
    assert "cannot separate" not in text and "Between-session standard deviation of each row's log samples/s (τ): " \
                                               "ddp " in text


def test_one_run_a_side_says_it_cannot_separate_the_change_from_run_to_run_variation():
    d = diff.compare(_records({"ddp": [100.0, 101.0, 99.0]}), _records({"ddp": [120.0, 121.0, 119.0]}))
    text = "\n".join(diff.lines(d))
    assert ("**A and B are each one run**: these intervals count the variation between launches, not between runs "
            "at other times") in text
    assert "so this diff cannot separate the change from run-to-run variation" in text


def test_a_change_of_machine_is_refused_unless_asked_for(tmp_path):
    a = _run(tmp_path, "a", {"ddp": [100.0, 101.0, 99.0]})
    b = _run(tmp_path, "b", {"ddp": [120.0, 121.0, 119.0]})
    recs = [json.loads(line) for line in (b / "records.jsonl").read_text().splitlines()]
    for r in recs:
        r["env"]["cpu_model"] = "Intel Xeon"
    (b / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    shown = CliRunner().invoke(app, ["diff", str(a), str(b)])
    assert shown.exit_code == 2 and shown.stdout == ""
    assert shown.stderr == ("error: A and B ran on different machines (CPU AMD EPYC against Intel Xeon): a diff of them "
                            "compares the machines, not the change; say --across-machines to compare them\n")
    asked = CliRunner().invoke(app, ["diff", str(a), str(b), "--across-machines"])
    assert asked.exit_code == 0, asked.output
    assert "What differs: CPU AMD EPYC → Intel Xeon." in asked.stdout
    assert "The runs are on different machines (--across-machines): the ratios compare the machines" in asked.stdout


def test_compare_diff_takes_joins_a_side(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "cache"))
    rng = random.Random(8)
    sides = {}
    for side in ("a", "b"):
        runs = []
        for s in range(2):
            vals = {"ddp": [1000 * math.exp(rng.gauss(0, 0.02)) for _ in range(3)]}
            d = _run(tmp_path, f"{side}{s}", vals)
            recs = [json.loads(line) for line in (d / "records.jsonl").read_text().splitlines()]
            for r in recs:  # the fixture is a time-to-target run; sessions are of throughput runs
                r.pop("until_target", None)
            (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            runs.append(d)
        out = tmp_path / f"join_{side}"
        assert CliRunner().invoke(app, ["join", str(out), *map(str, runs)]).exit_code == 0
        sides[side] = out
    shown = CliRunner().invoke(app, ["diff", str(sides["a"]), str(sides["b"])])
    assert shown.exit_code == 0, shown.output
    assert "2 sessions of A against 2 of B" in shown.stdout and "cannot separate" not in shown.stdout
    # a join against one of its own runs: the two sides are not independent (it was accepted, every launch of that
    # run counted on both sides)
    shown = CliRunner().invoke(app, ["diff", str(sides["a"]), str(tmp_path / "a1")])
    assert (shown.exit_code, shown.stdout) == (2, "")
    assert shown.stderr == (f"error: A and B share a run ({tmp_path / 'a1'} in B holds the same launches as ../a1 in "
                            f"A): a diff takes its two sides as independent, and launches on both sides would count "
                            f"twice; give runs that are not in the other side's join\n")
    # a join against another single run: the join's launches were pooled as one run's, its spread between sessions
    # dropped (a join's spawn shown 26,712 [20,443–34,902] where its own report said [3,696–193,076]), under a
    # banner that called it one run
    other = _run(tmp_path, "other", {"ddp": [1000.0, 1010.0, 990.0]})
    for x, y, joined, one in ((sides["a"], other, "A", "B"), (other, sides["a"], "B", "A")):
        shown = CliRunner().invoke(app, ["diff", str(x), str(y)])
        assert (shown.exit_code, shown.stdout) == (2, "")
        assert shown.stderr == (f"error: {joined} is a join of 2 sessions and {one} one run: a join's sessions are its "
                                "unit, and one run gives no spread between sessions to set against them (pooling the "
                                "join's launches as one run's would drop that spread); join runs of "
                                f"{one}'s condition (`compare run --join {one}`, or `compare join`) and diff the joins, "
                                f"or diff one of {joined}'s runs against {one} (a run made with `compare run --join` "
                                "alone: its DIR/records.jsonl)\n")
    # or a copy of one of its runs whose figures were edited (it was diffed as another run)
    edited = tmp_path / "edited"
    edited.mkdir()
    recs = [json.loads(line) for line in (tmp_path / "a1" / "records.jsonl").read_text().splitlines()]
    (edited / "records.jsonl").write_text("".join(json.dumps({**r, "samples_per_s": r["samples_per_s"] * 1.3}) + "\n"
                                                  for r in recs))
    shown = CliRunner().invoke(app, ["diff", str(sides["a"]), str(edited)])
    assert (shown.exit_code, shown.stdout) == (2, "")
    assert shown.stderr.startswith(f"error: A and B share a run ({edited} in B holds the same launches as ../a1 in A "
                                   f"with other samples/s (3 of 3: its figures were edited)): ")


def test_what_differs_names_how_the_ranks_were_laid_out_and_started():
    # one node against two simulated nodes over ssh, and ssh against SLURM, each said only "git commit" differed:
    # a reader would lay the change of speed at the commit's door
    from harness.ground.record import read_records

    runs = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
    one, ssh, slurm = (read_records(runs / name / "records.jsonl.gz") for name in
                       ("digits_cpu2_20261124-051630", "digits_cpu2_2nodes_20261124-052411",
                        "digits_cpu2_2nodes_20261124-053133"))
    laid_out = [c for c in diff.compare(one, ssh)["context"] if c[0] != "git commit"]
    assert ("nodes", 1, 2) in laid_out and ("processes per node", [2], [1, 1]) in laid_out, laid_out
    assert ("hosts started by", "local", "ssh") in laid_out, laid_out
    assert [c[0] for c in diff.compare(ssh, slurm)["context"] if c[0] != "git commit"] == ["hosts started by",
                                                                                         "cores per node"]


def test_what_differs_reads_every_session_of_a_side_not_its_first():
    # a join of runs on two commits against one on the second: "git commit d7575ff → aad7823" claimed the whole of A
    # ran the first (sessions of two torch versions are no longer joined; of two commits they are)
    rng = random.Random(3)

    def commit(side, *names):
        for (_, records), name in zip(side, names):
            for r in records:
                r["env"] = {**r["env"], "git_commit": name}
        return side

    a, b = commit(_side(rng, 2, 0.02, 0.02), "d7575ff", "aad7823"), commit(_side(rng, 2, 0.02, 0.02), *["aad7823"] * 2)
    d = diff.compare(a, b)
    assert ("git commit", "d7575ff, aad7823", "aad7823") in d["context"]
    same = diff.compare(commit(_side(rng, 2, 0.02, 0.02), *["aad7823"] * 2), b)
    assert not any(what == "git commit" for what, _, _ in same["context"])


def test_what_differs_names_a_frameworks_version_and_the_tuning_variables():
    # it named torch alone: a diff of DeepSpeed 0.19.8 against 0.18.0, or of runs under other OPENBLAS_* or NCCL_*
    # variables, said only that the commit differed
    def run(framework, tuning, torch="2.13.0"):
        recs = _records({"ddp": [100.0, 101.0, 99.0], "deepspeed": [90.0, 91.0, 89.0]}, torch=torch)
        for r in recs:
            r["env"]["tuning_env"] = tuning
            r["adapter_info"] = {"framework": framework if r["label"] == "deepspeed" else f"torch {torch}"}
        return recs

    d = diff.compare(run("deepspeed 0.19.8", {"OPENBLAS_CORETYPE": "Haswell"}), run("deepspeed 0.18.0", {}))
    assert ("What differs: tuning variables OPENBLAS_CORETYPE=Haswell → none; deepspeed's framework deepspeed 0.19.8 "
            "→ deepspeed 0.18.0.") in "\n".join(diff.lines(d))
    # another torch is said once, not again as every row's framework that names it
    d = diff.compare(run("deepspeed 0.19.8", {}), run("deepspeed 0.19.8", {}, torch="2.14.0"))
    assert "What differs: torch 2.13.0 → 2.14.0." in "\n".join(diff.lines(d))


def test_one_row_that_moved_is_not_called_a_change_of_the_machine_and_interference_is_named():
    # an outside check: horovod 1.96x faster in B, ddp 1.05x and spawn 0.97x not resolved, and the diff said "Every
    # resolved row moved the same way ... a change of the machine moves every row alike"; A's launches were 10 of 12
    # under interference, B's none, with no word of it
    a = _records({"ddp": [100.0, 101.0, 99.0], "spawn": [100.0, 102.0, 98.0], "horovod": [50.0, 51.0, 49.0]})
    b = _records({"ddp": [104.0, 101.0, 105.0], "spawn": [97.0, 99.0, 96.0], "horovod": [98.0, 99.0, 97.0]})
    for r in a[:5]:
        r["noise"] = {"flags": ["other processes 40%"]}
    text = "\n".join(diff.lines(diff.compare(a, b)))
    assert "moved the same way" not in text
    assert ("Launches measured under interference (other processes or steal over their timed windows; each side's "
            "report names them): A 5 of 9, B 0 of 9: a row's change between the sides may be what that interference "
            "did to it, not a change of the code or the machine.") in text
    # every row resolved one way: that is what a change of the machine does
    c = _records({"ddp": [150.0, 151.0, 149.0], "spawn": [150.0, 152.0, 148.0], "horovod": [75.0, 76.0, 74.0]})
    assert "Every row moved the same way: runs share no rounds" in "\n".join(diff.lines(diff.compare(a, c)))


def test_one_rows_change_is_measured_against_the_rows_that_did_not_change():
    # an outside check: B ran ddp with comm_hook=fp16 on a quieter machine; every row read "faster in B", ddp too,
    # while against spawn and horovod of the same runs (whatever moved every row cancels) fp16 had slowed it
    a = {"ddp": [100.0, 104.0, 98.0, 102.0], "spawn": [90.0, 93.0, 88.0, 91.0], "horovod": [60.0, 62.0, 59.0, 61.0]}
    b = {"ddp": [v * 1.2 for v in a["ddp"]], "spawn": [v * 1.5 for v in a["spawn"]],
         "horovod": [v * 1.5 for v in a["horovod"]]}

    def rows(values, hook):
        recs = _records(values)
        for r in recs:
            r["controls"]["knobs"] = {"comm_hook": hook if r["label"] == "ddp" else None}
        return recs

    d = diff.compare(rows(a, None), rows(b, "fp16"))
    assert {r["label"]: r["outcome"] for r in d["rows"]} == {"ddp": "faster in B", "spawn": "faster in B",
                                                             "horovod": "faster in B"}
    pairs = {(r["label"], r["control"]): r for r in d["against_unchanged"]}
    assert set(pairs) == {("ddp", "spawn"), ("ddp", "horovod")}
    for r in pairs.values():
        assert r["estimate"] == pytest.approx(0.8) and r["hi"] < 1 and r["outcome"] == "slower in B"
    text = "\n".join(diff.lines(d))
    assert "ddp/spawn 0.800× [" in text and "is the change's own effect" in text
    # where every row changed, or none did, there is nothing to hold the change against
    assert diff.compare(rows(a, None), rows(b, None))["against_unchanged"] == []


def test_a_row_measured_on_one_side_only_says_what_the_other_sides_launches_did():
    # an outside check: "Only measured in A: ddp", where every ddp launch of B had failed on its knob, unsaid
    a = _records({"ddp": [100.0, 101.0, 99.0], "spawn": [90.0, 91.0, 89.0]})
    b = _records({"spawn": [90.0, 91.0, 89.0]}) + [
        {"kind": "run", "label": "ddp", "status": "failed", "repeat": k, "workload": "digits", "world_size": 2,
         "reason": "rank 0 exited with code 1;\n first error: X", "controls": {"global_batch": 64}, "env": {}}
        for k in range(3)]
    text = "\n".join(diff.lines(diff.compare(a, b)))
    assert "Only measured in A: ddp (ddp in B: failed: rank 0 exited with code 1; first error: X)." in text


def test_a_run_made_with_join_is_diffed_alone_by_its_records_file(tmp_path):
    # a run made with `compare run --join` is a join of its sessions as a directory: its own session could not be
    # diffed (the refusal's advice, "diff one of B's runs", named no way to give it)
    from harness.commands.diff import _side

    d = _run(tmp_path, "b", {"ddp": [120.0, 121.0, 119.0]})
    (d / "sessions.json").write_text("{}")
    [(name, records)] = _side(d / "records.jsonl")
    assert name == str(d) and [r["samples_per_s"] for r in records] == [120.0, 121.0, 119.0]
    a = _run(tmp_path, "a", {"ddp": [100.0, 101.0, 99.0]})
    result = CliRunner().invoke(app, ["diff", str(a), str(d / "records.jsonl")])
    assert result.exit_code == 0 and "| ddp | 100 [" in result.output, result.output


def _learning(values, diffs, losses, knobs=None, why=None):
    """_records with what each row learned: its largest parameter difference (checked at 1e-5), final loss and
    accuracy, and each row's adapter (its label up to the first colon)."""
    out = _records(values)
    for r in out:
        r.update(adapter=r["label"].split(":")[0], max_param_diff=diffs[r["label"]], final_loss=losses[r["label"]],
                 eval={"accuracy": 0.9, "target": 0.8, "target_met": True, "metric": "test accuracy"},
                 equivalence={"checked": True, "tolerance": 1e-5,
                              **({"why_failed": why} if why and diffs[r["label"]] > 1e-5 else {})})
    return out


def test_what_each_row_learned_is_set_beside_its_speed_and_a_check_that_changed_is_said_with_its_reason():
    # an outside check: a diff of a run against one with a knob that broke equivalence said only how fast each row
    # ran, and every row read "not resolved" while ddp had gone from ✓ to ✗
    a = _learning({"ddp": [100.0, 101.0, 99.0], "spawn": [90.0, 91.0, 89.0]},
                  {"ddp": 2e-8, "spawn": 2e-8}, {"ddp": 0.5, "spawn": 0.5})
    b = _learning({"ddp": [100.0, 101.0, 99.0], "spawn": [90.0, 91.0, 89.0]},
                  {"ddp": 3e-3, "spawn": 2e-8}, {"ddp": 0.61, "spawn": 0.50001}, why="BatchNorm  statistics per rank.")
    text = "\n".join(diff.lines(diff.compare(a, b)))
    assert "| ddp | 2.0e-08 ✓ → 3.0e-03 ✗ | 0.5 → 0.61 | 0.9000 ✓ → 0.9000 ✓ |" in text, text
    assert ("What changed in what was learned: ddp matched the reference in A and not in B (B's report: BatchNorm "
            "statistics per rank.); final loss moved by more than 0.1%: ddp 0.5 → 0.61.") in text
    same = "\n".join(diff.lines(diff.compare(a, _learning({"ddp": [100.0, 101.0, 99.0]}, {"ddp": 2e-8},
                                                          {"ddp": 0.5}))))
    assert "Every row's check reads the same in both, and every final loss is within 0.1% of A's." in same


def test_one_adapters_row_under_another_label_a_side_is_paired_and_its_knob_is_what_differs():
    # an outside check: A ran ddp, B ddp:sync_bn=true; the diff refused with "no row was measured in both runs"
    a = _learning({"ddp": [100.0, 101.0, 99.0], "spawn": [90.0, 91.0, 89.0]},
                  {"ddp": 3e-3, "spawn": 3e-3}, {"ddp": 0.5, "spawn": 0.5})
    b = _learning({"ddp:sync_bn=true": [80.0, 81.0, 79.0], "spawn": [90.0, 91.0, 89.0]},
                  {"ddp:sync_bn=true": 2e-8, "spawn": 3e-3}, {"ddp:sync_bn=true": 0.5, "spawn": 0.5})
    for r in a + b:
        # a run records every knob of a row, a default one too
        r["controls"]["knobs"] = {"sync_bn": r["label"] == "ddp:sync_bn=true"}
    d = diff.compare(a, b)
    assert [r["label"] for r in d["rows"]] == ["ddp", "spawn"] and d["only_a"] == d["only_b"] == []
    text = "\n".join(diff.lines(d))
    assert "| ddp → ddp:sync_bn=true | 100 [" in text
    assert "| ddp → ddp:sync_bn=true | 3.0e-03 ✗ → 2.0e-08 ✓ |" in text
    assert "Paired across labels, the only row of its adapter measured under another label a side: ddp in A with " \
           "ddp:sync_bn=true in B." in text
    assert "ddp's knob sync_bn False → True" in text
    # two rows of one adapter on a side: which is which is not known, and none is paired
    b2 = b + _learning({"ddp:bucket_cap_mb=1": [80.0, 81.0, 79.0]}, {"ddp:bucket_cap_mb=1": 2e-8},
                       {"ddp:bucket_cap_mb=1": 0.5})
    assert diff.compare(a, b2)["only_a"] == ["ddp"]
