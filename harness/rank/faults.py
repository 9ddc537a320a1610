"""Fault injection for tests: COMPARE_FAULT / spec.fault = "ADAPTER:RANK:KIND:STEP".

Runs in: every rank. KIND is exit (os._exit(3)), raise (RuntimeError), hang (block forever) or kill (SIGKILL
to itself, as the OOM killer or a `kill -9` would), injected at the start of step STEP; STEP "eval" at the start of
the evaluation after the timed steps; STEP "split" after the breakdown's profiled steps, as their split begins
(--breakdown: the row's result is already written); STEP "end" after the rank has written its result, during
shutdown; STEP "start" before the rank has said anything (RANK is then the rank its launcher gave it), as a launcher
or rendezvous stuck before the worker began would look.
"""

from __future__ import annotations

import os
import sys
import threading


def fault_for(spec, rank: int):
    """(kind, step) if a fault is injected into this rank, else None. spec.fault None: COMPARE_FAULT decides;
    "" (a calibration launch of `compare scale`): no fault, whatever the environment says."""
    text = os.environ.get("COMPARE_FAULT") if spec.fault is None else spec.fault
    if not text:
        return None
    name, frank, kind, step = text.split(":")
    if name == spec.adapter and int(frank) == rank:
        return kind, (step if step in ("start", "eval", "split", "end") else int(step))
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
    raise ValueError(f"unknown fault kind {kind!r}")
