"""Fault injection for tests: COMPARE_FAULT / spec.fault = "ADAPTER:RANK:KIND:STEP".

Runs in: every rank. KIND is exit (os._exit(3)), raise (RuntimeError), hang (block forever), kill (SIGKILL to itself, as
a `kill -9` would), stop (SIGSTOP to itself, as a `kill -STOP` would) or oom (allocate until the kernel's out-of-memory
killer ends it: only in a memory cgroup with a limit, never against the whole machine), injected at the start of step
STEP; STEP "eval" at the start of the evaluation after the timed steps; STEP "split" after the breakdown's profiled
steps, as their split begins (--breakdown: the row's result is already written); STEP "end" after the rank has written
its result, during shutdown; STEP "start" before the rank has said anything (RANK is then the rank its launcher gave
it), as a launcher or rendezvous stuck before the worker began would look.
"""

from __future__ import annotations

import os
import sys
import threading


KINDS = ("exit", "raise", "hang", "kill", "stop", "oom")
STEPS = ("start", "eval", "split", "end")


def parse(text: str) -> tuple[str, int, str, int | str]:
    """(adapter, rank, kind, step) of "ADAPTER:RANK:KIND:STEP"; ValueError naming what is wrong and the valid form
    (the parent checks COMPARE_FAULT before its first launch: a malformed one failed every row's launches)."""
    parts = text.split(":")
    form = f"ADAPTER:RANK:KIND:STEP (KIND one of {', '.join(KINDS)}; STEP a step number or one of {', '.join(STEPS)})"
    if len(parts) != 4 or not parts[0]:
        raise ValueError(f"COMPARE_FAULT={text!r} is not {form}, e.g. ddp:1:raise:3")
    name, frank, kind, step = parts
    if not frank.isdigit():
        raise ValueError(f"COMPARE_FAULT={text!r}: rank '{frank}' is not a whole number at least 0; the form is {form}")
    if kind not in KINDS:
        raise ValueError(f"COMPARE_FAULT={text!r}: unknown kind '{kind}'; valid choices: {', '.join(KINDS)}")
    if step not in STEPS and not step.isdigit():
        raise ValueError(f"COMPARE_FAULT={text!r}: step '{step}' is neither a step number nor one of "
                         f"{', '.join(STEPS)}")
    return name, int(frank), kind, (step if step in STEPS else int(step))


def fault_for(spec, rank: int):
    """(kind, step) if a fault is injected into this rank, else None. spec.fault None: COMPARE_FAULT decides;
    "" (a calibration launch of `compare scale`): no fault, whatever the environment says."""
    text = os.environ.get("COMPARE_FAULT") if spec.fault is None else spec.fault
    if not text:
        return None
    name, frank, kind, step = parse(text)
    if name == spec.adapter and frank == rank:
        return kind, step
    return None


def inject(kind: str, step: int | str) -> None:
    print(f"[fault injection] {kind} " + ("at start-up" if step == "start" else f"at step {step}"), file=sys.stderr,
          flush=True)
    if kind == "exit":
        os._exit(3)
    if kind == "raise":
        raise RuntimeError(f"injected fault at step {step}")
    if kind == "kill":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        threading.Event().wait()  # never set: this rank stops answering, its peers block in the collective
    if kind == "stop":
        import signal

        os.kill(os.getpid(), signal.SIGSTOP)  # as `kill -STOP` would: it answers no signal but SIGKILL and SIGCONT
    if kind == "oom":
        _exhaust_memory()
    raise ValueError(f"unknown fault kind {kind!r}")


def _exhaust_memory() -> None:
    """Allocate and touch memory until the OOM killer ends this process, having asked it to choose this one first
    (oom_score_adj 1000). Refused outside a memory cgroup with a limit: it would press on the whole machine."""
    from harness.shared import oom

    if oom.memory_limit(oom.memory_cgroup()) is None:
        raise RuntimeError("the oom fault needs a memory cgroup with a limit (it allocates until the OOM killer "
                           "ends it)")
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    held = []
    while True:
        held.append(bytearray(64 * 2**20))  # zero-filled: every page touched
