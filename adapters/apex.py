"""NVIDIA apex: `apex.amp.initialize` + `apex.parallel.DistributedDataParallel`, ranks started by torchrun.

The seed blog's fastest row. It is built the way apex's own ImageNet example (examples/imagenet/main_amp.py, apex
<= 25.05) does it: `amp.initialize(model, optimizer, opt_level=...)` first, then `apex.parallel.DDP(model)`, then
`with amp.scale_loss(loss, optimizer) as scaled: scaled.backward()` and a plain `optimizer.step()`.

Facts this adapter is built on (and reports when they bite):
- apex.amp and apex DDP were deprecated in 2022 and removed upstream in May 2025; the last tag with them is 25.05.
- Both need CUDA: on CPU `amp.initialize` fails with "expected torch.cuda.FloatTensor" and apex DDP asserts
  "Torch not compiled with CUDA enabled". So this adapter only runs with `--device cuda`.
- PyPI's `apex` is an unrelated Pyramid web toolkit; NVIDIA apex is built from source:

      git clone --branch 25.05 https://github.com/NVIDIA/apex && cd apex
      pip install -v --disable-pip-version-check --no-cache-dir --no-build-isolation \\
          --config-settings "--build-option=--cpp_ext" --config-settings "--build-option=--cuda_ext" ./

apex's amp is fp16-only: O0 is fp32, O1 patches torch functions to run in fp16 where safe, O2 casts the model to
fp16 with fp32 master weights in the optimizer (batchnorm kept fp32), O3 is pure fp16. The `amp` adapter
(torch.amp autocast + GradScaler, fp16 on CUDA) is the modern equivalent of O1, and `ddp` of O0; run them side by
side so apex's own contribution is seen apart from mixed precision itself (the blog conflated apex with AMP, a 2x
batch and a data prefetcher):

    compare run --device cuda -n 1 -a ddp,apex:opt_level=O0,amp,apex:opt_level=O1,apex:opt_level=O2
    compare run --device cuda -n 1 -w resnet -a ddp,apex:opt_level=O0,amp,apex:opt_level=O1,apex:opt_level=O2

(One GPU: NCCL refuses two ranks on one GPU, so a one-GPU machine runs world size 1.)
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from adapters.base import EVERY_PARAMETER_FIX, Adapter, Availability, KnobError, ModelFacts, Precision
from adapters.probes import cuda_world_check
from adapters.ddp import DDPAdapter, DDPCost, DDPLaunch, DDPStrategy
from harness.shared.comm_schedule import Buckets

LAST_TAG = "25.05"
"""Last NVIDIA apex tag that still has apex.amp and apex.parallel.DistributedDataParallel (removed in PR 1896)."""

BUILD = (f"build NVIDIA apex {LAST_TAG}, the last tag with amp and DDP, from source on a machine with an NVIDIA "
         "GPU, nvcc and a CUDA build of torch: "
         f"git clone --branch {LAST_TAG} https://github.com/NVIDIA/apex && cd apex && pip install -v "
         "--disable-pip-version-check --no-cache-dir --no-build-isolation --config-settings "
         "\"--build-option=--cpp_ext\" --config-settings \"--build-option=--cuda_ext\" ./")
GPU_RUN = "run on a GPU machine: compare run --device cuda -n 1 -a amp,apex"
CUDA_FAILURES = ("amp.initialize raises 'expected torch.cuda.FloatTensor', apex DDP asserts 'Torch not compiled "
                 "with CUDA enabled'")

NOT_INSTALLED = ("NVIDIA apex is not installed (it is not on PyPI, whose `apex` is an unrelated web toolkit: it is "
                 "built from source)")
NEEDS_CUDA_CPU = f"apex needs CUDA and this run is on CPU ({CUDA_FAILURES})"
NEEDS_CUDA_NO_GPU = "apex needs CUDA and torch {torch} sees no GPU here ({failures})"

# Subpackages only NVIDIA apex has (any release): one of them present means the package is NVIDIA's.
_NVIDIA_MARKERS = ("amp", "parallel", "optimizers", "normalization", "fp16_utils", "multi_tensor_apply",
                   "transformer", "contrib", "mlp", "fused_dense")


@dataclass
class ApexInstall:
    """What is installed under the name `apex`, found without importing it (see `probe_install`)."""

    found: bool
    location: str = ""
    distribution: str | None = None
    """Distribution that provides the `apex` import name, with its version (NVIDIA builds say "apex 0.1")."""
    summary: str | None = None
    nvidia: bool = False
    has_amp: bool = False
    has_parallel: bool = False
    namespace: bool = False
    """A directory named apex without __init__.py (e.g. an apex source checkout in the working directory)."""


def probe_install() -> ApexInstall:
    """Locate `apex` on sys.path and tell NVIDIA's from the PyPI web toolkit by its files and metadata, without
    importing it (PyPI's apex imports pyramid at import time, NVIDIA's imports torch and its CUDA extensions)."""
    try:
        spec = importlib.util.find_spec("apex")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return ApexInstall(found=False)
    dirs = [Path(d) for d in (spec.submodule_search_locations or [])]
    location = str(dirs[0]) if dirs else str(spec.origin)
    namespace = bool(dirs) and spec.origin in (None, "namespace")

    def has(name: str) -> bool:
        return any((d / name / "__init__.py").is_file() or (d / f"{name}.py").is_file() for d in dirs)

    distribution = summary = None
    try:
        from importlib import metadata

        names = metadata.packages_distributions().get("apex", [])
        if names:
            meta = metadata.distribution(names[0]).metadata
            distribution = f"{meta['Name']} {meta['Version']}"
            summary = meta["Summary"]
    except Exception:  # noqa: BLE001 - metadata only sharpens the message; files decide
        pass
    nvidia = any(has(m) for m in _NVIDIA_MARKERS) or "nvidia" in (summary or "").lower()
    return ApexInstall(found=True, location=location, distribution=distribution, summary=summary, nvidia=nvidia,
                       has_amp=has("amp"), has_parallel=has("parallel"), namespace=namespace)


def _import_apex() -> tuple[Any, Any]:
    """Import apex.amp and apex.parallel quietly (old apex prints its syncBN choice at import)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module("apex.amp"), importlib.import_module("apex.parallel")


def _package_problem(inst: ApexInstall) -> tuple[str, str] | None:
    """(reason, fix) when what is installed as `apex` cannot give amp + DDP, else None."""
    if not inst.found:
        return NOT_INSTALLED, BUILD
    dist = f" ({inst.distribution})" if inst.distribution else ""
    if not inst.nvidia:
        what = (f"'{inst.distribution}: {inst.summary}'" if inst.distribution and inst.summary
                else "a directory without __init__.py (e.g. an apex source checkout in the working directory)"
                if inst.namespace else "a package with none of NVIDIA apex's modules (amp, parallel, optimizers, ...)")
        return (f"the package named apex at {inst.location} is not NVIDIA apex but {what} (PyPI's `apex` is an "
                "unrelated Pyramid web toolkit)", f"pip uninstall apex, then {BUILD}")
    missing = [m for m, ok in (("apex.amp", inst.has_amp), ("apex.parallel.DistributedDataParallel",
                                                            inst.has_parallel)) if not ok]
    if not missing:
        try:
            amp, parallel = _import_apex()
        except Exception as exc:  # noqa: BLE001 - any import failure is the reason
            first = (str(exc).strip().splitlines() or [""])[0]
            return (f"NVIDIA apex at {inst.location}{dist} does not import: `import apex.amp, apex.parallel` "
                    f"raised {type(exc).__name__}: {first}",
                    f"rebuild it against this torch: pip uninstall apex, then {BUILD}")
        missing = [f"apex.amp.{a}" for a in ("initialize", "scale_loss", "master_params") if not hasattr(amp, a)]
        if not hasattr(parallel, "DistributedDataParallel"):
            missing.append("apex.parallel.DistributedDataParallel")
    if missing:
        return (f"NVIDIA apex at {inst.location}{dist} has no {' or '.join(missing)}: apex.amp and "
                "apex.parallel.DistributedDataParallel were removed upstream in May 2025 (last tag with them: "
                f"{LAST_TAG})", f"replace it with tag {LAST_TAG}: pip uninstall apex, then {BUILD}")
    return None


def _cuda_problem(device: str, world_size: int) -> tuple[str, str] | None:
    if device != "cuda":
        return NEEDS_CUDA_CPU, GPU_RUN
    import torch

    if not torch.cuda.is_available():
        return NEEDS_CUDA_NO_GPU.format(torch=torch.__version__, failures=CUDA_FAILURES), GPU_RUN
    gpus = cuda_world_check(device, world_size)
    return None if gpus else (gpus.reason, gpus.fix)


class ApexLaunch(DDPLaunch):
    """Apex: the parent's role (adapters/base.py: Launch)."""

    # ---- parent side -------------------------------------------------------------------------------------
    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        """Both facts when both are missing: a user on a CPU machine without apex must learn that installing
        apex alone will not do (it needs CUDA too)."""
        try:
            problems = [p for p in (_package_problem(probe_install()), _cuda_problem(device, world_size)) if p]
        except Exception as exc:  # noqa: BLE001 - availability never raises
            return Availability(False, f"apex availability check failed: {type(exc).__name__}: {exc}")
        if not problems:
            return Availability(True)
        return Availability(False, "; also, ".join(r for r, _ in problems), "; then ".join(f for _, f in problems))

    def knob_availability(self, device: str, world_size: int) -> Availability:
        return Availability(True)  # none of its knobs needs more than apex itself (DDP's reads its compile knob)

    def model_availability(self, facts: ModelFacts) -> Availability:
        # apex.parallel.DistributedDataParallel (apex/parallel/distributed.py, 25.05): each rank all-reduces in the
        # first backward the gradients it holds, flattened (allreduce_fallback: `if param.grad is not None`), and
        # builds its buckets from the order they arrived; later backwards all-reduce a bucket once every gradient of
        # it has arrived and raise at the end where one has not ("Some param buckets were not allreduced").
        # delay_allreduce all-reduces, after each backward, the gradients the rank holds (allreduce_fallback).
        if facts.ranks_differ:
            return Availability(
                False, f"the ranks leave different parameters without a gradient: {facts.differ_text()} in the check "
                       f"before launching, and apex DDP all-reduces the gradients each rank holds, flattened, so its "
                       f"ranks would reduce different tensors (NCCL hangs or mixes gradients)", EVERY_PARAMETER_FIX)
        if facts.sparse:
            return Availability(
                False, f"the model gives sparse gradients ({', '.join(facts.sparse)}: an embedding with sparse=True), "
                       f"which apex DDP flattens with the dense ones into one bucket to all-reduce",
                "build the embedding with sparse=False (a dense gradient)")
        sometimes = [n for n in facts.no_gradient if n not in facts.never_used]
        if sometimes and not self.knobs.delay_allreduce:
            return Availability(
                False, f"the model leaves parameters without a gradient in some steps and not others: "
                       f"{facts.unused_text()}, and apex DDP builds its buckets from the first backward's gradients "
                       f"and raises at the end of a later backward that leaves one unreduced (\"Some param buckets "
                       f"were not allreduced\")",
                f"add the knob delay_allreduce=true (-a {self.name}:delay_allreduce=true): apex then all-reduces "
                f"the gradients present after each backward")
        return Availability(True)

    def batch_norm(self) -> str | None:
        return ""  # apex.parallel.convert_syncbn_model exists, and this adapter has no knob for it

    def failure_fix(self, error: str) -> str | None:
        if "param buckets were not allreduced" in error or "some buckets were not allreduced" in error:
            return (f"a step left parameters without a gradient that the first step had: add the knob "
                    f"delay_allreduce=true (-a {self.name}:delay_allreduce=true)")
        return None

    @classmethod
    def environment(cls) -> dict[str, Any]:
        return {"apex": asdict(probe_install())}


class ApexStrategy(DDPStrategy):
    """Apex: every rank's role (adapters/base.py: Strategy)."""

    def _initialize_kwargs(self) -> dict[str, Any]:
        """amp.initialize overrides: only what the user set, so each opt level keeps apex's own defaults."""
        k, kwargs = self.knobs, {"opt_level": self.knobs.opt_level}
        if k.loss_scale != "auto":
            kwargs["loss_scale"] = k.loss_scale  # apex parses "dynamic" or a number string itself
        if k.keep_batchnorm_fp32 is not None:
            kwargs["keep_batchnorm_fp32"] = k.keep_batchnorm_fp32
        return kwargs

    # ---- rank side ---------------------------------------------------------------------------------------
    def import_framework(self) -> None:
        super().import_framework()
        _import_apex()

    def wrap(self, model, optimizer):
        from apex import amp
        from apex.parallel import DistributedDataParallel as ApexDDP

        # O2 swaps the optimizer's fp16 params for fp32 masters in place, position for position: remember which
        # user parameter each position holds, to return the masters by name.
        names = {id(p): n for n, p in model.named_parameters()}
        self._master_names = [names.get(id(p)) for g in optimizer.param_groups for p in g["params"]]
        model, optimizer = amp.initialize(model, optimizer, **self._initialize_kwargs())
        # After amp.initialize, never before: it may recast parameters, which would break DDP's hooks.
        given = {"delay_allreduce": self.knobs.delay_allreduce, "message_size": self.knobs.message_size}
        model = ApexDDP(model, **{key: v for key, v in given.items() if v is not None})  # unset: apex's defaults
        return Adapter.wrap(self, model, optimizer)

    def zero_grad(self):
        # With master weights (O2) apex replaces zero_grad by one that takes no set_to_none argument.
        self.optimizer.zero_grad()

    def backward(self, loss):
        from apex import amp

        with amp.scale_loss(loss, self.optimizer) as scaled:
            scaled.backward()

    def clip_gradients(self):
        # With master weights (O2) the optimizer steps fp32 copies whose gradients amp.scale_loss's exit unscaled
        # into: those are what apex's documentation clips, not the model's fp16 gradients.
        if self.max_grad_norm is not None:
            import torch
            from apex import amp

            torch.nn.utils.clip_grad_norm_(amp.master_params(self.optimizer), self.max_grad_norm)

    def step(self):
        self.clip_gradients()
        # Looked up at call time: after an fp16 overflow apex swaps in a one-shot skip_step.
        self.optimizer.step()

    def gather_parameters(self, model):
        """fp32 masters by the user module's names: for O2 the optimizer's fp32 master weights (the fp16 model
        weights are their rounding); for O0/O1 the model's own fp32 weights; for O3 the fp16 weights, widened."""
        from apex import amp

        masters = {n: p.detach().float().cpu().clone()
                   for n, p in zip(self._master_names, amp.master_params(self.optimizer)) if n is not None}
        return {n: masters[n] if n in masters else p.detach().float().cpu().clone()
                for n, p in self.unwrap(model).named_parameters()}

    def comm(self):
        return None  # apex has no collectives of its own: its DDP calls torch.distributed

    def describe(self):
        import torch

        inst = probe_install()
        k = self.knobs
        d = {"framework": f"apex ({inst.distribution or 'no distribution metadata'}), torch {torch.__version__}",
             "backend": self.info.backend if self.info else None, "apex": asdict(inst),
             "extensions": {m: importlib.util.find_spec(m) is not None for m in ("apex_C", "amp_C")},
             "precision": self.precision().value, "opt_level": k.opt_level, "knobs": asdict(k)}
        if self.model is not None:
            d["resolved"] = {"delay_allreduce": getattr(self.model, "delay_allreduce", None),
                             "message_size": getattr(self.model, "message_size", None)}
        with contextlib.suppress(Exception):  # the loss scale apex ended with (dynamic scaling moves it)
            from apex.amp._amp_state import _amp_state

            d["final_loss_scale"] = float(_amp_state.loss_scalers[0].loss_scale())
        if k.opt_level == "O0":
            d["note"] = ("apex O0 is fp32: set it beside the `ddp` row (torch DDP, fp32) to see what apex DDP "
                         "alone changes")
        else:
            d["note"] = (f"apex {k.opt_level} is fp16, the same precision as the `amp` row on CUDA (torch.amp "
                         "fp16 + GradScaler): the difference between those two rows is apex's own contribution, "
                         "not mixed precision itself")
        ext = d["extensions"]
        built = [m for m, ok in ext.items() if ok]
        d["note"] += ("; compiled extensions " + (", ".join(built) if built else "none")
                      + ("" if all(ext.values()) else
                         f" (without {', '.join(m for m, ok in ext.items() if not ok)} apex falls back to slower "
                         f"Python paths: `make gpu-check` builds both)"))
        return d


class ApexCost(DDPCost):
    """Apex: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    @classmethod
    def plan_knobs(cls, dtype):
        # apex's amp is fp16 only: O1 and O2 are its mixed-precision recipes (O0 is fp32, ddp's row; O3, pure fp16,
        # is apex's speed baseline, not a training recipe)
        if dtype != "fp16":
            return "apex amp trains in fp16 (O1, O2); at fp32 (O0) ddp is the row"
        return [{"opt_level": "O1"}, {"opt_level": "O2"}]

    def _half_model(self) -> bool:
        """O2 and O3 cast the model itself to fp16 (O0 and O1 keep it fp32)."""
        return self.knobs.opt_level in ("O2", "O3")

    def model_state_bytes(self, params, largest, n, optimizer_bytes, trainable=None):
        # O0/O1: the fp32 model is its own master (as DDP). O2: amp.initialize casts the model to fp16 (frozen
        # parameters too) and keeps fp32 master copies of the trainable ones in the optimizer, with fp32 master
        # gradients beside the model's fp16 ones (_process_optimizer.py allocates them after the first backward),
        # then the optimizer state. O3: everything fp16, the optimizer's state too (it follows its parameters).
        t = params if trainable is None else trainable
        level = self.knobs.opt_level
        if level == "O2":
            return params * 2 + t * (2 + 4 + 4 + optimizer_bytes)
        if level == "O3":
            return params * 2 + t * (2 + optimizer_bytes / 2)
        return super().model_state_bytes(params, largest, n, optimizer_bytes, trainable)

    def model_state_rule(self, optimizer_bytes, frozen=False):
        level = self.knobs.opt_level
        if level == "O2":
            rule = f"2P + {10 + optimizer_bytes:g}T" if frozen else f"{12 + optimizer_bytes:g}P"
            return (f"{rule} (apex O2: the fp16 model and its gradients; fp32 master parameters, their gradients and "
                    f"the optimizer state)")
        if level == "O3":
            rule = f"2P + {2 + optimizer_bytes / 2:g}T" if frozen else f"{4 + optimizer_bytes / 2:g}P"
            return f"{rule} (apex O3: the fp16 model, its gradients and the optimizer state, all fp16)"
        return super().model_state_rule(optimizer_bytes, frozen) + f" (apex {level}: the fp32 model is the master)"

    def memory_buffers(self, tensors, largest, n, trainable=None):
        # apex DDP keeps no bucket: it flattens each bucket of message_size elements into a temporary copy to
        # all-reduce and copies the result back (allreduce_bucket), one at a time on its stream during backward
        t = sum(tensors) if trainable is None else trainable
        elements = 10_000_000 if self.knobs.message_size is None else self.knobs.message_size
        grad = 2 if self._half_model() else 4
        out = [("apex DDP's flattened bucket", grad * min(elements, t),
                f"one bucket of message_size {elements:g} elements (at most the gradients) flattened into a "
                f"{grad * 8}-bit copy to all-reduce while backward runs")]
        # O1 patches torch's functions to cast their fp32 inputs to fp16, and caches each weight's cast
        # (utils.cached_cast) until amp.scale_loss ends after backward: a 16-bit copy of every weight a matmul
        # takes, checkpointed blocks' too (largest["matmul"], where the planner counted them)
        if self.knobs.opt_level == "O1" and largest.get("matmul"):
            out.append(("apex O1's cast cache", 2 * largest["matmul"],
                        f"every matmul and convolution weight cast to fp16 in forward, cached until amp.scale_loss "
                        f"ends after backward, 2W (W: those weights' parameters, {largest['matmul']:,.0f})"))
        return out

    # apex's DDP packs gradients into messages of message_size elements (default 1e7) and all-reduces each as it
    # fills during backward; delay_allreduce waits for the whole backward instead (no overlap, fewer calls).
    TUNE = {"message_size": (1_000_000, 100_000_000), "delay_allreduce": (True,)}

    def comm_schedule(self):
        k = self.knobs
        # apex DDP's defaults: buckets of message_size = 1e7 elements, overlapped with backward unless
        # delay_allreduce; O2/O3 keep an fp16 model, so its gradients (and the wire) are half the fp32 bytes.
        elements = 10_000_000 if k.message_size is None else k.message_size
        half = k.opt_level in ("O2", "O3")
        size = elements * (2 if half else 4)
        return Buckets(comm_backend="torch", wire_scale=0.5 if half else 1.0, overlap=not k.delay_allreduce,
                       bucket_bytes=size, first_bucket_bytes=size)


class ApexAdapter(ApexLaunch, ApexStrategy, ApexCost, DDPAdapter):
    name = "apex"
    summary = "NVIDIA apex: amp.initialize (O0-O3) + apex.parallel.DistributedDataParallel, launched by torchrun"
    launcher = "torchrun"
    blog_label = (3, "apex")

    @dataclass
    class Knobs:
        opt_level: Annotated[Literal["O0", "O1", "O2", "O3"], "the letter O"] = "O1"
        """apex amp optimisation level (letter O): O0 fp32, O1 fp16 casts around torch functions (the blog's),
        O2 fp16 model with fp32 master weights, O3 pure fp16."""
        loss_scale: str = "auto"
        """auto (the opt level's default: dynamic for O1/O2, 1.0 for O0/O3), dynamic, or a fixed number."""
        keep_batchnorm_fp32: bool | None = None
        """Keep batchnorm in fp32 (O2/O3 only; unset: the opt level's default)."""
        delay_allreduce: bool | None = None
        """apex DDP: all-reduce every gradient after backward instead of overlapping buckets with it (unset:
        apex's default, off)."""
        message_size: int | None = None
        """apex DDP: minimum number of elements in a communication bucket (unset: apex's default, 1e7)."""

        def __post_init__(self):
            if self.loss_scale not in ("auto", "dynamic"):
                try:
                    ok = float(self.loss_scale) > 0
                except ValueError:
                    ok = False
                if not ok:
                    raise KnobError(f"knob 'loss_scale' must be auto, dynamic or a positive number; "
                                    f"got '{self.loss_scale}'")
            if self.keep_batchnorm_fp32 is not None and self.opt_level in ("O0", "O1"):
                raise KnobError(f"knob 'keep_batchnorm_fp32' applies to opt_level O2 and O3 only (O0 is all fp32; "
                                f"apex refuses it with O1, which runs batchnorm in fp32 itself); got {self.opt_level}")
            if self.message_size is not None and self.message_size < 1:
                raise KnobError(f"knob 'message_size' must be a positive number of elements; got {self.message_size}")

    def precision(self) -> Precision:
        return Precision.FP32 if self.knobs.opt_level == "O0" else Precision.FP16

    def compression(self) -> str:
        return "none"  # apex DDP has no communication hooks (DDPAdapter's reads a knob apex does not have)


ADAPTER = ApexAdapter
