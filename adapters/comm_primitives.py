"""The communication primitives a framework offers `compare comm` (`Adapter.comm()` returns one): sum reductions,
blocking unless the name says async; a primitive the framework lacks raises NotImplementedError naming it, which
becomes an `unsupported` cell, never a fallback to another library.

Runs in: every rank of a `compare comm` launch (harness/rank/comm_cells.py)."""

from __future__ import annotations

from typing import ClassVar


class Comm:
    """A framework's communication primitives, as `compare comm` calls them (sum reductions; blocking unless the
    name says async). A primitive the framework lacks raises NotImplementedError, which becomes an `unsupported`
    cell with the message: never a fallback to another library."""

    framework: str = "this framework"
    """Named in the message of a missing primitive, e.g. "horovod 0.28.1"."""
    missing: ClassVar[dict[str, str]] = {}
    """Primitive -> how to say what is missing ("reduce to one rank (only allreduce)")."""

    def _missing(self, op: str):
        raise NotImplementedError(f"{self.framework} has no {self.missing.get(op, op)}")

    def all_reduce(self, t):
        self._missing("all_reduce")

    def all_reduce_async(self, t):
        """Start an all-reduce; return a handle with wait()."""
        self._missing("all_reduce_async")

    def all_reduce_coalesced(self, ts):
        """All-reduce several tensors in one coalesced call."""
        self._missing("all_reduce_coalesced")

    def broadcast(self, t, src):
        self._missing("broadcast")

    def reduce(self, t, dst):
        self._missing("reduce")

    def all_gather(self, out, t):
        self._missing("all_gather")

    def gather(self, outs, t, dst):
        self._missing("gather")

    def scatter(self, out, ins, src):
        self._missing("scatter")

    def reduce_scatter(self, out, t):
        self._missing("reduce_scatter")

    def all_to_all(self, out, t):
        self._missing("all_to_all")

    def send(self, t, dst):
        self._missing("send")

    def recv(self, t, src):
        self._missing("recv")

    def isend(self, t, dst):
        self._missing("isend")

    def irecv(self, t, src):
        self._missing("irecv")

    def batch_sendrecv(self, send, dst, recv, src):
        """One batched send to `dst` and receive from `src`."""
        self._missing("batch_sendrecv")

    def barrier(self):
        self._missing("barrier")
