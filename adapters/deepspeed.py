"""DeepSpeed: the engine's backward/step, ZeRO stages 0-3, ranks started by the `deepspeed` launcher.

    compare run --adapters ddp,deepspeed:zero_stage=0,deepspeed:zero_stage=3
    compare run --adapters deepspeed --knob deepspeed.precision=bf16 --knob deepspeed.offload_optimizer=true

On CPU the launcher runs with DS_ACCELERATOR=cpu; without oneCCL bindings DeepSpeed's CPU accelerator picks gloo.
The workload's own optimizer and LR stay in charge: the ds config has no "optimizer" and no "scheduler" block,
and `wrap` checks after `deepspeed.initialize` that the LR and the batch sizes are exactly the workload's.

Across hosts (harness/launching/hosts.py): `deepspeed --hostfile` with its pdsh launcher and `--venv_script` (remote
ranks get the variables the harness writes into the file named by DS_ENV_FILE, since pdsh forwards almost nothing); node
ranks that are all on this machine use DeepSpeed's own `--no_ssh --node_rank r`, one launcher per node rank; inside a
SLURM allocation `--launcher slurm`, whose `srun` starts the ranks without RANK/WORLD_SIZE/LOCAL_RANK, so `setup` maps
SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID to them.

First use JIT-compiles C++ ops (deepspeed_shm_comm ~35 s on 2 cores, at `init_distributed` on CPU) into
TORCH_EXTENSIONS_DIR, which later runs reuse. The launch log says when that happens, and `describe()` records the
seconds spent in `init_distributed` and `initialize`. Unless the user sets TORCH_EXTENSIONS_DIR, the launch sets it
to `<venv>/torch_extensions`: torch's own default (~/.cache/torch_extensions/py311_cpu) is shared by every venv of
the same Python, and keys a build by the op's name alone while its command line holds the venv's paths, so two
venvs take turns rebuilding the op (35-65 s each time), which would land in another row's time to first step.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from adapters.base import (EVERY_PARAMETER_FIX, REENTRANT_FIX, Adapter, Availability, Cost, DeviceKnobError,
                           KnobError, Launch, LaunchPlan, Precision, RankInfo, Strategy, cpu_sync_batch_norm,
                           flat_layout, interpreter, per_tensor_optimizer, rank_command, sync_batch_norm_in_place)
from adapters.launchers import AGENT_STORE_ENV, agent_store, on_node
from adapters.probes import compile_availability, cuda_world_check, torch_build
from adapters.rank_side import ranks_from_slurm
from adapters.deepspeed_env import (STALE_LOCKS_ENV, clear_stale_jit_locks, cpu_fp16_supported, ds_report_quietly,
                                    fp16_zero0_scales_its_loss, installed_version_info, jit_cache_dir,
                                    jit_cached_ops, launcher_path, shm_leftover, shm_segment)
from harness.shared.comm_schedule import Zero
from harness.shared.text import listed

PINNED_VERSION = "0.19.8"
INSTALL_FIX = (f"run `make setup` (adapters/install/deepspeed.sh), or "
               f".venv/bin/pip install deepspeed=={PINNED_VERSION} \"torch==$(.venv/bin/python -c "
               f"'import torch; print(torch.__version__)')\"")
RANK_SCRIPT = Path(__file__).resolve().parent.parent / "harness" / "rank" / "as_script.py"
"""The rank entry point as a script file, for DeepSpeed's slurm launcher (which cannot start a module)."""
# Ops DeepSpeed JIT-compiles on the paths this adapter uses, for the "first run" log line.
_JIT_OPS_AT_INIT = ("deepspeed_shm_comm",)


class DeepSpeedLaunch(Launch):
    """DeepSpeed: the parent's role (adapters/base.py: Launch)."""

    COMM_PATHS = ("deepspeed/comm",)  # deepspeed.comm, over torch.distributed

    # ---- parent side -------------------------------------------------------------------------------------
    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        if importlib.util.find_spec("deepspeed") is None:
            return Availability(False, "deepspeed is not installed", INSTALL_FIX)
        try:
            info = installed_version_info()
        except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
            return Availability(False, f"deepspeed's version file does not load: {type(exc).__name__}: {exc}",
                                INSTALL_FIX)
        if info is None or not info.get("version"):
            where = importlib.util.find_spec("deepspeed").submodule_search_locations
            return Availability(False, f"'deepspeed' at {list(where or [])} is not an installed DeepSpeed "
                                       f"(no deepspeed/git_version_info_installed.py)", INSTALL_FIX)
        if launcher_path() is None:
            return Availability(False, f"deepspeed {info['version']} is installed but its `deepspeed` launcher "
                                       f"is neither next to {sys.executable} nor on PATH", INSTALL_FIX)
        if torch_build().get("broken"):
            return Availability(False, f"torch fails to import here ({torch_build()['broken']})",
                                "reinstall it (`make clean setup`), or remove what shadows it from PYTHONPATH")
        if device == "cpu":
            if not torch_build().get("gloo"):
                return Availability(False, "this torch build has no gloo backend (DeepSpeed's CPU fallback)",
                                    "install torch from PyPI")
        return cuda_world_check(device, world_size)

    def knob_availability(self, device: str, world_size: int) -> Availability:
        k = self.knobs
        if k.compile and not (compiled := compile_availability(device)):
            return compiled
        try:
            broken = k.precision == "fp16" and k.zero_stage == 0 and fp16_zero0_scales_its_loss() is False
            version = (installed_version_info() or {}).get("version", "?") if broken else ""
        except Exception:  # noqa: BLE001 - never raises: an unreadable install is not this check's to judge
            return Availability(True)
        if broken:
            return Availability(False, f"precision=fp16 with zero_stage=0 does not train on deepspeed {version}: its "
                                       f"engine.backward() leaves the loss unscaled while its FP16 optimizer divides "
                                       f"the gradients by the loss scale, 2^16 at first (deepspeedai/DeepSpeed#8393)",
                                "use zero_stage=1, 2 or 3 (engine.backward() scales the loss for a ZeRO "
                                "optimizer) or precision=bf16, or a DeepSpeed with that fix")
        return Availability(True)

    def model_availability(self, facts):
        # ZeRO-0 gives a parameter without a gradient zeros before its all-reduce (runtime/engine.py,
        # _get_gradients_for_reduction: "we must create empty grads") and all-reduces a sparse gradient as one
        # (engine.sparse_allreduce): it takes either model. ZeRO-1/2 reduce a rank's gradients in buckets filled as
        # its backward hooks fire (stage_1_and_2.py, reduce_ipg_grads) and ZeRO-3 per parameter as it is fetched, so
        # ranks with different gradients reduce different buckets (measured: gloo's "collective mismatch", or an
        # abort), and their flat partitions take no sparse tensor (aten::view has no SparseCPU kernel).
        stage = self.knobs.zero_stage
        for refused in (cpu_sync_batch_norm(facts, self.device_kind, self.name, self.knobs.sync_bn),
                        flat_layout(facts, f"DeepSpeed (it views each parameter's storage as bytes"
                                           f"{' and shards it' if stage == 3 else ''})", empty_too=stage == 3,
                                    scalar_too=True)):
            if refused is not None:
                return refused
        if facts.compiled and stage == 3:
            # ZeRO-3's pre-forward hook sets module._parameters._in_forward on every module, and a torch.compile
            # wrapper's _parameters is a plain dict (measured: "'dict' object has no attribute '_in_forward'")
            where = ", ".join(n or "the model itself" for n in facts.compiled[:4])
            whole = all(not n for n in facts.compiled)
            # compile=true compiles the whole model: for a model that compiles only some blocks it is another
            # program, so the fixes that keep the user's program (uncompiled, or ZeRO-2: a compiled block matched there
            # at 3.0e-8) come first there
            inside = (f"add the knob compile=true (-a {self.name}:zero_stage=3:compile=true), which compiles "
                      f"{'it' if whole else 'the whole model, not those blocks alone,'} inside DeepSpeed's engine")
            fix = (f"build the model uncompiled and {inside}" if whole else
                   f"build those blocks without torch.compile (ZeRO-3 then runs them eagerly), use zero_stage 2 or "
                   f"lower (-a {self.name}:zero_stage=2), whose hooks take a compiled block, or {inside}")
            return Availability(
                False, f"the model is already wrapped by torch.compile ({where}), and ZeRO-3's hooks fail on its "
                       f"wrapper at the first forward (\"'dict' object has no attribute '_in_forward'\")", fix)
        other = facts.dtypes_outside({"fp16", "fp32", "bf16"})
        if other:  # every stage: "attempting to reduce an unsupported grad type: torch.float64" (measured)
            held = "+".join(facts.param_dtypes or other)
            return Availability(False, f"the model's parameters are {held}, and DeepSpeed reduces "
                                       f"gradients in fp32, fp16 or bf16 only (\"attempting to reduce an "
                                       f"unsupported grad type\" at the first step)",
                                "build the model in fp32" if "fp64" in other else
                                "build the model's parameters as real fp32 tensors (a complex one as two real ones)")
        if stage == 0:
            if "fp16" in facts.param_dtypes and self.device_kind == "cpu":
                # DeepSpeed's CPU accelerator supports fp32 and bf16 (supported_dtypes), and ZeRO-0's all-reduce
                # asserts on it (measured: "attempting to reduce an unsupported grad type: torch.float16")
                return Availability(False, "the model's parameters are fp16, and DeepSpeed's CPU accelerator reduces "
                                           "fp32 and bf16 only at ZeRO-0 (\"attempting to reduce an unsupported grad "
                                           "type: torch.float16\" at the first step)",
                                    f"build the model in bf16 or fp32, or a ZeRO stage of 1 or 2 "
                                    f"(-a {self.name}:zero_stage=1), which runs an fp16 model here")
            return Availability(True)
        if facts.multihead and stage == 3 and getattr(self.knobs, "compile", False):
            # measured: "RuntimeError: b must be 2D" in Dynamo's fake tensors, out_proj's weight a Parameter of size
            # (0,): compiled, ZeRO-3's per-module gathering misses a parameter the forward of another module reads
            # (plain ZeRO-3 and ZeRO-0 with compile=true ran the same model, 3.0e-8 ✓)
            return Availability(
                False, f"the model holds torch.nn.MultiheadAttention ({listed(facts.multihead, 3)}), whose forward reads out_proj's "
                       f"weight without calling out_proj, and under compile=true ZeRO-3 hands it out_proj's empty "
                       f"partition (it fails at the first forward: \"b must be 2D\" in Dynamo)",
                "in the model builder, mark the layer a ZeRO-3 leaf, gathered whole around its forward: "
                "`deepspeed.utils.set_z3_leaf_modules(model, [torch.nn.MultiheadAttention])` (checked: 3.0e-8), or "
                f"ZeRO-3 without compile (-a {self.name}:zero_stage=3)")
        if facts.twice and stage == 3:
            # measured: stage3.py's bucket assertion, len(set(p.ds_id ...)) == len(params_in_bucket)
            return Availability(
                False, f"a parameter's gradient was made twice in one backward in the check before launching "
                       f"({facts.twice_text()}), and ZeRO-3 reduces each parameter's gradient once per backward "
                       f"(it fails at the first step: an AssertionError in stage3.py's reduce bucket)",
                f"{REENTRANT_FIX}; or zero_stage=0 (-a {self.name}:zero_stage=0), which all-reduces the summed "
                f"gradient after the backward")
        if facts.ranks_differ:
            return Availability(
                False, f"the ranks leave different parameters without a gradient: {facts.differ_text()} in the check "
                       f"before launching, and ZeRO-{stage} reduces the gradients each rank's backward produced, so "
                       f"its ranks would reduce different buckets (gloo aborts: \"collective mismatch\"; NCCL hangs)",
                f"{EVERY_PARAMETER_FIX}; or zero_stage=0 (-a {self.name}:zero_stage=0), which gives a missing "
                f"gradient zeros")
        if facts.sparse:
            return Availability(
                False, f"the model gives sparse gradients ({', '.join(facts.sparse)}: an embedding with sparse=True), "
                       f"which ZeRO-{stage}'s flat gradient partitions cannot hold",
                f"build the embedding with sparse=False (a dense gradient), or zero_stage=0 "
                f"(-a {self.name}:zero_stage=0), which all-reduces a sparse gradient as one")
        return Availability(True)

    @classmethod
    def multinode(cls, topology) -> Availability:
        if topology.launcher == "ssh" and topology.remote and shutil.which("pdsh") is None:
            return Availability(False, "pdsh is not on PATH: DeepSpeed's launcher starts the ranks on other hosts "
                                       "with pdsh", "install pdsh (Debian: apt-get install pdsh, or `make "
                                                    "cluster-deps`)")
        return Availability(True)

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        accelerator = {"DS_ACCELERATOR": "cpu" if spec.device == "cpu" else "cuda",
                       "TORCH_EXTENSIONS_DIR": str(jit_cache_dir())}
        module = ["--module", *rank_command(spec_path)[2:]]
        stale = clear_stale_jit_locks(wait_fresh=True)  # before any rank of this launch exists: none holds one
        if stale:
            accelerator[STALE_LOCKS_ENV] = os.pathsep.join(map(str, stale))
        topo = spec.topology
        if topo is None or not topo.remote:
            # The rendezvous store is bound by the parent and held for the whole launch; the ranks join it as
            # clients, as under torchrun's agent (a port picked free and released before the launcher binds it
            # could be taken by another job in between).
            store = agent_store(spec.world_size)
            env = {**accelerator, **AGENT_STORE_ENV}
            if topo is None:
                # --num_gpus is DeepSpeed's name for processes per node on any accelerator (alias
                # --num_accelerators); on CPU the launcher would otherwise start one rank per NUMA node. Its
                # children get --local_rank=N, which the rank entry point ignores.
                argv = [launcher_path(), "--num_gpus", str(spec.world_size), "--master_addr", "127.0.0.1",
                        "--master_port", str(store.port), *module]
                return LaunchPlan(argv, env=env, hold=[store], leftovers=[shm_leftover("127.0.0.1", store.port)])
            # Node ranks that are all on this machine: DeepSpeed's own no-ssh mode, one launcher per node rank.
            hostfile = self._hostfile(spec)
            return LaunchPlan.per_node([
                on_node(node, [launcher_path(), "--hostfile", str(hostfile), "--no_ssh", "--node_rank", str(r),
                               "--master_addr", topo.master, "--master_port", str(store.port), *module])
                for r, node in enumerate(topo.nodes)], env=env, hold=[store],
                leftovers=[shm_leftover(topo.master, store.port)])
        # Across hosts rank 0 binds the store at the master address (no parent there to hold it). DeepSpeed
        # forwards almost nothing to remote ranks but the file named by DS_ENV_FILE, which the harness fills.
        env_file = Path(spec.rank_dir) / "deepspeed_env"
        env = {**accelerator, "DS_ENV_FILE": str(env_file), "MASTER_ADDR": topo.master, "MASTER_PORT": str(topo.port)}
        argv = [launcher_path(), "--hostfile", str(self._hostfile(spec)), "--master_addr", topo.master,
                "--master_port", str(topo.port)]
        if topo.launcher == "slurm":
            # DeepSpeed's slurm launcher runs `srun -n N python -u SCRIPT ARGS` (no --module, and no
            # deepspeed.launcher.launch on the nodes): ranks map SLURM_PROCID/NTASKS/LOCALID in `setup`.
            # As the harness's own srun steps: a failed rank ends the step, and each rank gets its share of the
            # node's CPUs rather than the one CPU a task gets by default where SLURM binds tasks to cores.
            srun_args = ["--kill-on-bad-exit=1"]
            if topo.cores:
                srun_args.append(f"--cpus-per-task={max(1, min(topo.cores) // topo.nodes[0].slots)}")
            argv += ["--launcher", "slurm", "--launcher_args", " ".join(srun_args), "--num_nodes",
                     str(len(topo.nodes)), str(RANK_SCRIPT), str(spec_path)]
        else:
            # pdsh reaches every host over ssh (this one too); --venv_script puts the venv first on PATH there,
            # or remote ranks use the system's ninja and rebuild the JIT-compiled op (100-200 s).
            argv += ["--launcher", "pdsh", "--venv_script", str(Path(interpreter()).parent / "activate"), *module]
        return LaunchPlan(argv, env=env, env_file=env_file)

    @staticmethod
    def _hostfile(spec) -> Path:
        path = Path(spec.rank_dir) / "hostfile"
        path.write_text("".join(f"{n.host} slots={n.slots}\n" for n in spec.topology.nodes))
        return path

    @classmethod
    def environment(cls) -> dict[str, Any]:
        """What `ds_report` tells, from DeepSpeed's own objects: version, accelerator, and per op whether it
        was built at install time, can be JIT-built here, and is already in the JIT cache."""
        return ds_report_quietly(PINNED_VERSION)

    def failure_fix(self, error):
        if "has already been reduced" in error:  # a gradient hook fired twice in one backward
            return REENTRANT_FIX
        if self.knobs.zero_stage in (1, 2) and "zip() argument 2 is longer than argument 1" in error:
            # measured: LambdaLR stepped from a hook on the optimizer's step, two param groups (nanoGPT's decay and
            # no-decay): the scheduler's _update_lr zips the one narrowed group with its two learning rates
            return (f"{per_group_step(self.knobs.zero_stage)}: a torch scheduler stepped from a hook on that step "
                    f"finds fewer groups than it holds learning rates, and would advance once per group; "
                    f"{PER_GROUP_FIX}")
        if self.knobs.zero_stage == 3 and re.search(r"size of tensor \w \(\d+\) must match the size of tensor \w "
                                                    r"\(0\)|size of tensor \w \(0\) must match", error):
            # measured: an EMA of the weights updated in the forward from named_parameters(), which ZeRO-3 holds
            # as empty partitions outside their own module's forward (an attribute read, F.linear(h, emb.weight),
            # is gathered for it; iterating parameters() is not)
            # measured too: a BYOL teacher updated in place from the online network's parameters was dropped by a
            # read-only gather (7.6e-2 ✗), and a gather at the forward's start met parameters ZeRO-3 was already
            # fetching ("Cannot partition a param in flight"); modifier_rank=0 after the networks ran, 1.2e-7 ✓
            # measured too: MAML's inner step (torch.autograd.grad over named_parameters(), then functional_call
            # with the fast weights) met the same empty partitions, and a gather around it did not make it train:
            # ZeRO-2 or lower is its fix (ZeRO-1 and 2 matched at 1.5e-8), so it comes first
            return ("ZeRO-3 holds each parameter as an empty partition (0 elements) outside its own module's forward: "
                    "code that reads parameters other than through their module's attribute there (iterating "
                    "named_parameters() or parameters(): an EMA update, or a MAML inner step's torch.autograd.grad "
                    "and functional_call over them) sees them empty; use zero_stage 2 or lower "
                    f"(-a {self.name}:zero_stage=2), which keeps every parameter whole on every rank; for an EMA-like "
                    "update at ZeRO-3, gather the parameters around it with "
                    "`with deepspeed.zero.GatheredParameters(list(params)):` after the networks' forward (at its "
                    "start ZeRO-3 may be fetching them: \"Cannot partition a param in flight\"), with "
                    "modifier_rank=0 where it writes to them (without it the gathered copies are read-only and a "
                    "change to them is dropped), or do that work outside the forward")
        return None

    def edited_parameters_fix(self):
        # measured (an outside check): a DINO teacher updated in place after the networks' forward, ZeRO-3 5.3e-2 ✗
        # (its update ran on empty partitions: nothing changed); within GatheredParameters(modifier_rank=0) 4.5e-8 ✓;
        # the same update moved to an optimizer step post-hook: ZeRO-1 1.9e-2 ✗, ZeRO-3 7.0e-2 ✗
        if self.knobs.zero_stage != 3:
            return None
        return ("ZeRO-3 holds each parameter as an empty partition outside its own module's forward, so code that "
                "reads or writes another module's parameters there (the teacher's update from the student's) runs on "
                "empty tensors and changes nothing, and the same update after the optimizer's step (a step hook) "
                "does too; fix: keep it in the forward, after the networks' forward, within "
                "`deepspeed.zero.GatheredParameters(params, modifier_rank=0)`")

    def missing_gradient(self):
        # Read in DeepSpeed 0.19.8's source and measured (docs/your-model.md, "What each backend does differently").
        moves = ("so the optimizer steps it: its running state (SGD's momentum, Adam's moment estimates) and weight "
                 "decay keep moving it where a single process leaves it alone")
        stage = self.knobs.zero_stage
        if stage == 0:
            return (f"DeepSpeed's engine gives a parameter without a gradient a zero one before the all-reduce "
                    f"(runtime/engine.py, _get_gradients_for_reduction: \"we must create empty grads\"), {moves}")
        if stage in (1, 2):
            return (f"ZeRO-{stage} flattens each parameter group into one fp32 partition whose gradient holds zeros for "
                    f"a parameter without one (runtime/zero/stage_1_and_2.py, get_all_grad_tensors), {moves}")
        return ("ZeRO-3 steps a parameter without a gradient with the last gradient it got, zeros if it never got "
                "one: its gradient partition (runtime/zero/stage3.py, __param_id_to_grad_partition) is written only "
                "when the parameter's gradient is reduced and is not cleared between steps, and "
                "independent_gradient_partition_epilogue hands every parameter's partition to the optimizer, so a "
                "stale gradient is applied again, with or without momentum (a DeepSpeed bug: the reproduction is in "
                f"docs/your-model.md), and a zero one {moves}")


def per_group_step(stage: int) -> str:
    """How ZeRO-`stage` calls the workload optimizer's step(), read in DeepSpeed 0.19.8's source and measured."""
    if stage == 3:
        return ("ZeRO-3 calls the workload optimizer's step() once per parameter sub-group each training step, with "
                "the other groups' params emptied (runtime/zero/stage3.py, _optimizer_step)")
    return (f"ZeRO-{stage} calls the workload optimizer's step() once per parameter group each training step, with "
            f"its param_groups narrowed to that group (runtime/zero/stage_1_and_2.py, _optimizer_step)")


PER_GROUP_FIX = ("fix: count the steps in each group that steps, inside the optimizer's step() (for g in "
                 "self.param_groups: if g['params']: g['t'] = g.get('t', 0) + 1, then its lr from g['t']), as "
                 "docs/your-model.md's schedule does, or zero_stage=0")
"""The fix of a learning-rate schedule that counts step() calls, under ZeRO's step per parameter group (measured:
every row matched at 3.0e-8 with it)."""


class DeepSpeedStrategy(Strategy):
    """DeepSpeed: every rank's role (adapters/base.py: Strategy)."""

    sparse_clip_fixed: int = 0
    """Steps whose sparse gradients the adapter clipped after DeepSpeed's own clip left them unscaled
    (`_clip_sparse_too`), and `sparse_clip_least` the smallest coefficient it applied."""
    sparse_clip_least: float = 1.0

    # ---- rank side ---------------------------------------------------------------------------------------
    def import_framework(self) -> None:
        with contextlib.redirect_stdout(sys.stderr):  # its accelerator banner
            import deepspeed  # noqa: F401
            import deepspeed.comm  # noqa: F401

    def setup(self, spec) -> RankInfo:
        import torch

        cached_before = set(jit_cached_ops())
        self.stale_locks_removed = [p for p in os.environ.get(STALE_LOCKS_ENV, "").split(os.pathsep) if p]
        if self.stale_locks_removed and os.environ.get("RANK", "0") == "0":
            print(f"[deepspeed] removed a stale JIT build lock no process held (left by a build that was stopped): "
                  f"{', '.join(self.stale_locks_removed)}", flush=True)
        # The shared-memory all-reduce op is DeepSpeed's CPU accelerator's: a CUDA launch never builds it.
        missing = [op for op in _JIT_OPS_AT_INIT if op not in cached_before] if spec.device != "cuda" else []
        if missing:
            note = (f"first run: JIT-compiling {', '.join(missing)} (~35-65 s on 2 cores, once; cached in "
                    f"{jit_cache_dir()})")
            self.phase(note)  # the live progress line, so a user sees why this launch is slow
            if os.environ.get("RANK", "0") == "0":
                print(f"[deepspeed] {note}", flush=True)
        t0 = time.perf_counter()
        ranks_from_slurm()  # DeepSpeed's slurm launcher leaves that to the script
        import deepspeed
        import deepspeed.comm as ds_dist

        if spec.device == "cuda":  # each rank on its own GPU before NCCL starts (it binds to the current device)
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))

        # No dist_backend: DeepSpeed picks its accelerator's (ccl with oneCCL bindings, else gloo on CPU).
        deepspeed.init_distributed(dist_init_required=True)
        self.timings_s["init_distributed_s"] = time.perf_counter() - t0
        rank, world = ds_dist.get_rank(), ds_dist.get_world_size()
        own = shm_segment(rank) if spec.device != "cuda" else None  # the CPU accelerator's segment only
        if own is not None and int(os.environ.get("LOCAL_SIZE", "0")) == world:  # DeepSpeed's own test for shm
            # Every rank has mapped every peer's segment once all are past init: the names can go then (the
            # mappings stay), so nothing is left in /dev/shm even if a rank is killed later.
            torch.distributed.barrier()
            own.unlink(missing_ok=True)
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        if spec.device == "cuda":
            torch.cuda.set_device(local_rank)
            device = f"cuda:{local_rank}"
        else:
            device = "cpu"
        self.jit_built = sorted(set(jit_cached_ops()) - cached_before)
        self.info = RankInfo(rank=rank, world_size=world, local_rank=local_rank, device=device,
                             backend=torch.distributed.get_backend(), data_rank=rank, data_world=world)
        self.global_batch = spec.global_batch
        return self.info

    def _ds_config(self) -> dict[str, Any]:
        """The DeepSpeed config: batch sizes equal to the workload's, no optimizer/scheduler blocks, so the
        workload's optimizer and LR are used untouched, and its gradient clipping."""
        k, world = self.knobs, self.info.world_size
        zero: dict[str, Any] = {"stage": k.zero_stage}
        if k.reduce_bucket_elems is not None:  # unset: DeepSpeed's own default
            zero["reduce_bucket_size"] = k.reduce_bucket_elems
        if k.offload_optimizer:
            # pin_memory only helps host<->GPU copies; on CPU it would only lock pages.
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": self.info.device != "cpu"}
        return {
            "train_batch_size": self.global_batch,
            "train_micro_batch_size_per_gpu": self.global_batch // world,
            "gradient_accumulation_steps": 1,
            # The workload's max_grad_norm, clipped by the engine over the global norm of every rank's partition
            # (ZeRO's optimizer sees only its own); 0 without one: DeepSpeed 0.19.8 would clip at norm 1.0 by
            # default, which changes the maths every other adapter does (and costs a gradient-norm reduction).
            "gradient_clipping": float(self.max_grad_norm or 0.0),
            "zero_optimization": zero,
            "bf16": {"enabled": k.precision == "bf16"},
            "fp16": {"enabled": k.precision == "fp16"},
            # The workload's torch optimizer (e.g. SGD) is not on DeepSpeed's tested list for ZeRO >= 1.
            "zero_allow_untested_optimizer": True,
            # ZeRO-Offload otherwise insists on DeepSpeedCPUAdam, which would replace the workload's optimizer.
            "zero_force_ds_cpu_optimizer": False,
        }  # everything else (steps_per_print: none; wall_clock_breakdown: off; buckets, overlap) stays DeepSpeed's

    def wrap(self, model, optimizer):
        import deepspeed

        lrs_before = [g["lr"] for g in optimizer.param_groups]
        self.groups = len(optimizer.param_groups)
        self.step_hooked = bool(getattr(optimizer, "_optimizer_step_pre_hooks", None)
                                or getattr(optimizer, "_optimizer_step_post_hooks", None))
        cached_before = set(jit_cached_ops())
        if self.knobs.sync_bn:  # in place: the optimizer given to initialize holds the same parameters
            self.synced_batch_norm = sync_batch_norm_in_place(model)
        self.config = self._ds_config()
        t0 = time.perf_counter()
        engine, ds_optimizer, _, scheduler = deepspeed.initialize(model=model, optimizer=optimizer,
                                                                  config=self.config)
        self.timings_s["initialize_s"] = time.perf_counter() - t0
        self.jit_built += sorted(set(jit_cached_ops()) - cached_before)
        # An adapter never changes LR or batch (fairness protocol): prove DeepSpeed did not either.
        lrs_after = [g["lr"] for g in optimizer.param_groups]
        if lrs_after != lrs_before or scheduler is not None:
            raise RuntimeError(f"DeepSpeed changed the workload's learning rate {lrs_before} -> {lrs_after} "
                               f"(scheduler {scheduler!r})")
        batches = (engine.train_batch_size(), engine.train_micro_batch_size_per_gpu(),
                   engine.gradient_accumulation_steps())
        want = (self.global_batch, self.global_batch // self.info.world_size, 1)
        if batches != want:
            raise RuntimeError(f"DeepSpeed resolved (train_batch, micro_batch, grad_accum) {batches}, expected {want}")
        if self.knobs.compile:
            engine.compile()  # DeepSpeed's own entry to torch.compile (the engine's module, its hooks kept)
        self.engine = engine
        if self.config["gradient_clipping"] > 0 and self.knobs.zero_stage == 0 and self.knobs.precision == "fp32":
            self._clip_sparse_too(engine)
        self.client_optimizer = type(optimizer).__name__
        # A step() of the workload's own (a class that clips or normalises inside it): from ZeRO-1 on, DeepSpeed
        # calls it on this rank's partition of the flat fp32 parameters alone
        owner = next((c for c in type(optimizer).__mro__ if "step" in vars(c)), None)
        self.own_step = (f"{owner.__qualname__}.step" if owner is not None
                         and not owner.__module__.startswith(("torch.", "deepspeed.")) else None)
        self.per_tensor = per_tensor_optimizer(optimizer)
        return super().wrap(engine, ds_optimizer)

    def _clip_sparse_too(self, engine):
        """ZeRO-0 fp32 clips in engine.clip_fp32_gradients with runtime/utils.py clip_grad_norm_, which takes the
        right global norm (a sparse gradient's is its coalesced values', every rank's alike) but scales each gradient
        with `p.grad.data.mul_(clip_coef)`: for a sparse tensor `.data` is a shallow copy whose in-place mul gets new
        values and leaves p.grad unscaled (torch 2.13), so DeepSpeed 0.19.8 clips the dense gradients alone
        (measured on a recommender with nn.Embedding(sparse=True), max_grad_norm 0.05: the dense gradients scaled by
        0.14, the embeddings' by 1.0; 7.5e-4 ✗). Its own clip is kept; the sparse gradients get the same coefficient,
        from the norm it returns."""
        import torch
        from deepspeed.runtime.utils import clip_grad_norm_

        def clip_fp32_gradients():
            total = clip_grad_norm_(parameters=engine.module.parameters(), max_norm=engine.gradient_clipping(),
                                    mpu=engine.mpu)
            sparse = [p for p in engine.module.parameters() if p.grad is not None and p.grad.is_sparse]
            if sparse:
                coef = torch.clamp(engine.gradient_clipping() / (total + 1e-6), max=1.0)  # DeepSpeed's own formula
                for p in sparse:
                    p.grad.mul_(coef.to(p.grad.dtype))  # on p.grad itself, not its .data copy
                self.sparse_clip_fixed += 1
                self.sparse_clip_least = min(self.sparse_clip_least, float(coef))
            return total

        engine.clip_fp32_gradients = clip_fp32_gradients

    def cast_input(self, x):
        # DeepSpeed casts the whole model to bf16/fp16, so float inputs must match (integer token ids stay).
        dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(self.knobs.precision)
        if dtype and x.is_floating_point():
            import torch

            return x.to(getattr(torch, dtype))
        return x

    def zero_grad(self) -> None:
        # engine.step() already zeroes the gradients after its optimizer step (and ZeRO owns the gradient
        # buffers from stage 2 on), so zeroing again here would be wasted work inside the timed step.
        pass

    def backward(self, loss):
        self.engine.backward(loss)

    def clip_gradients(self):
        pass  # the engine clips inside engine.step(), from the config's gradient_clipping (_ds_config)

    def step(self):
        self.engine.step()

    def dtypes(self, model):
        from adapters.base import dtype_names, optimizer_state

        d = super().dtypes(model)  # the engine's module: the parameters in the dtype DeepSpeed cast them to
        ds = self.engine.optimizer
        # The fp32 copy the optimizer updates: ZeRO-1/2's partitions, ZeRO-3's, the bf16 optimizer's, fp16's, and
        # ZeRO-0's FP16_UnfusedOptimizer (bf16 with a client optimizer: its fp32_groups, a list per group; read live
        # in 0.19.8, which the table had shown as no master copy)
        master = [t for attr in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat",
                                 "fp32_groups_flat_partition", "fp32_groups_flat", "fp32_groups")
                  for g in (getattr(ds, attr, None) or [])
                  for t in (g if isinstance(g, (list, tuple)) else [g]) if hasattr(t, "dtype")]
        d["master"] = dtype_names(master)
        if d["grads"] == "none":  # ZeRO moved them into its own buffers
            held = getattr(ds, "averaged_gradients", None) or {}
            grads = [t for v in (held.values() if isinstance(held, dict) else held)
                     for t in (v if isinstance(v, (list, tuple)) else [v]) if hasattr(t, "dtype")]
            d["grads"] = dtype_names(grads) if grads else f"{d['params']} (freed by the step)"
        # The wire: the ZeRO optimizer's own, else the engine's (its config, or the training dtype).
        d["reduce"] = dtype_names([getattr(ds, "communication_data_type", None)
                                   or self.engine.communication_data_type])
        inner = getattr(ds, "optimizer", None)  # the torch optimizer over the fp32 partitions
        if inner is not None and hasattr(inner, "state"):
            d["optimizer"] = dtype_names(optimizer_state(inner))
        return d

    def gather_parameters(self, model):
        """fp32 master weights by name: a collective from ZeRO-1 on (ZeRO-1/2 all-reduce the owner's fp32
        partition, ZeRO-3 all-gathers it), so every rank calls it, parameters in the same order."""
        import deepspeed
        from deepspeed.utils import safe_get_full_fp32_param

        out = {}
        for name, p in self.unwrap(model).named_parameters():
            try:
                full = safe_get_full_fp32_param(p)  # None when DeepSpeed keeps no separate fp32 copy (ZeRO-0 fp32)
            except KeyError:  # ZeRO-3, a parameter the optimizer does not hold (its grad_position has no entry): it
                full = None  # has no fp32 partition, on any rank alike; gathered below as it is
            if full is None and hasattr(p, "ds_id"):  # a ZeRO-3 parameter with no optimizer link: gather it
                with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                    full = p.detach().clone()
            out[name] = (p if full is None else full).detach().float().cpu().clone()
        return out

    def eval_module(self, model):
        # The engine: under ZeRO-3 its forward hooks gather the partitioned parameters on every rank.
        return model

    def all_reduce_mean(self, tensor):
        import deepspeed.comm as ds_dist

        out = tensor.clone()
        ds_dist.all_reduce(out, op=ds_dist.ReduceOp.SUM)
        return out / self.info.world_size

    def barrier(self):
        import deepspeed.comm as ds_dist

        ds_dist.barrier()

    def comm(self):
        from adapters.ddp import TorchComm

        class DeepSpeedComm(TorchComm):
            """deepspeed.comm mirrors torch.distributed's API (through its own wrapper, which is what is timed)."""

            def __init__(self):
                import deepspeed.comm as ds_dist

                self.dist = ds_dist

            def all_reduce_coalesced(self, ts):
                self.dist.all_reduce_coalesced(ts)

        return DeepSpeedComm()

    def teardown(self):
        import torch.distributed as dist

        if self.engine is not None:
            self.engine.destroy()
        if dist.is_initialized():
            dist.destroy_process_group()

    def skipped_steps(self):
        # DeepSpeed counts the steps its fp16 loss scaler skipped; bf16 and fp32 have no scaler.
        if self.engine is None or not self.engine.fp16_enabled():
            return None
        return int(self.engine.skipped_steps)

    def describe(self) -> dict[str, Any]:
        import deepspeed
        import torch
        from deepspeed.accelerator import get_accelerator

        d: dict[str, Any] = {
            "framework": f"deepspeed {deepspeed.__version__}", "torch": torch.__version__,
            "accelerator": get_accelerator()._name, "backend": self.info.backend if self.info else None,
            "zero_stage": self.knobs.zero_stage, "precision": self.precision().value,
            "offload_optimizer": self.knobs.offload_optimizer, "knobs": super().describe()["knobs"],
            "setup_timings_s": dict(self.timings_s),
            "jit_ops_built_this_run": self.jit_built, "jit_cache_dir": str(jit_cache_dir()),
            "stale_jit_locks_removed": self.stale_locks_removed,
        }
        if self.engine is not None:
            e = self.engine
            d.update({"ds_config": self.config, "client_optimizer": self.client_optimizer,
                      "engine_optimizer": type(e.optimizer).__name__,
                      "resolved": {**self._synced_layers(), "zero_stage": e.zero_optimization_stage(),
                                   "train_batch_size": e.train_batch_size(),
                                   "micro_batch_per_rank": e.train_micro_batch_size_per_gpu(),
                                   "gradient_accumulation_steps": e.gradient_accumulation_steps(),
                                   "bf16": e.bfloat16_enabled(), "fp16": e.fp16_enabled(),
                                   "gradient_clipping": e.gradient_clipping(), "lr": e.get_lr(),
                                   "reduce_bucket_size": e.zero_reduce_bucket_size(),
                                   "overlap_comm": e.zero_overlap_comm()}})
            if self.sparse_clip_fixed:
                d["sparse_gradient_clip"] = (
                    f"DeepSpeed {deepspeed.__version__}'s clip_grad_norm_ leaves sparse gradients unscaled "
                    f"(p.grad.data.mul_ on a sparse tensor changes a copy); the adapter scaled them by DeepSpeed's own "
                    f"clip coefficient in {self.sparse_clip_fixed} step(s), by {self.sparse_clip_least:.3g} at the "
                    f"least")
        notes = self._notes()
        if notes:
            d["note"] = "; besides, ".join(notes)
        return d

    def _notes(self) -> list[str]:
        """What this row does that a failed equivalence check should say (the record's adapter note): ZeRO's step
        per parameter group under a schedule that counts steps, and a step() of the workload's own on a partition."""
        notes = []
        stage = self.knobs.zero_stage
        if stage >= 1 and self.per_tensor:
            # measured (an outside check): torch.optim.Adafactor 8.3e-03 ✗ at ZeRO-2 and 1.5e-08 ✓ at ZeRO-0; one
            # 64x32 weight stepped whole against flattened differed by 7.4e-02 after 3 steps in one process
            notes.append(f"the workload's optimizer is {self.per_tensor}, whose step depends on each parameter's "
                         f"shape and whole values (Adafactor factors a matrix's second moment over its rows and "
                         f"columns and scales by the parameter's RMS; LAMB and LARS scale by each tensor's norm), and "
                         f"ZeRO-{stage} hands it this rank's flat 1-D partition of the fp32 parameters instead, so it "
                         f"computes other statistics than a single process; fix: zero_stage=0 "
                         f"(-a {self.name}:zero_stage=0), or an optimizer whose step is elementwise (Adam, AdamW, SGD) "
                         f"to check equivalence")
        if stage >= 1 and self.groups > 1 and (self.own_step or self.step_hooked):
            # measured: a warm-up counted in step(), or LambdaLR stepped from a hook, with two param groups: ZeRO-3
            # 6.1e-03 ✗ where every other row matched; counted per group, every row matched at 3.0e-8
            driven = (f"a step() of its own ({self.own_step})" if self.own_step else "a hook on its step")
            notes.append(f"{per_group_step(stage)}, and the workload's optimizer has {self.groups} groups and "
                         f"{driven}: a schedule that counts step() calls (in step() or a scheduler stepped from a "
                         f"hook on it) advances once per group each training step here; {PER_GROUP_FIX}")
        if self.own_step and stage >= 1:
            notes.append(f"the workload's optimizer has a step() of its own ({self.own_step}), which ZeRO-{stage} "
                         f"calls on this rank's partition of the fp32 parameters and gradients alone: what it "
                         f"computes across parameters (a gradient-norm clip, a global statistic) sees that partition, "
                         f"where a single process sees them all (a clip belongs in the workload's max_grad_norm, "
                         f"which the engine applies to the global norm)")
        return notes


class DeepSpeedCost(Cost):
    """DeepSpeed: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    # ZeRO stages 1 and 2 partition optimizer state (and gradients) at the cost of an all-gather of the updated
    # parameters: less memory, more traffic, the same maths in fp32. The reduce bucket (DeepSpeed's default 5e8
    # elements, larger than most models here) sets how gradients are grouped into collectives.
    TUNE = {"zero_stage": (1, 2), "reduce_bucket_elems": (1_000_000, 50_000_000), "compile": (True,)}

    @classmethod
    def plan_knobs(cls, dtype):
        return [{"zero_stage": stage, "precision": dtype} for stage in (1, 2, 3)]

    def _bits(self) -> int:
        """Bytes of the model's own (bit16) copy: 2 under bf16/fp16, 4 when DeepSpeed trains in fp32."""
        return 4 if self.knobs.precision == "fp32" else 2

    def gradient_bytes(self):
        return float(self._bits())  # DeepSpeed reduces the model's own gradients, in its dtype

    def model_state_bytes(self, params, largest, n, optimizer_bytes, trainable=None):
        # DeepSpeed's own accounting (estimate_zero2/3_model_states_mem_needs, no offload): the model's bit16
        # parameters (b bytes) and gradients, an fp32 master copy, fp32 gradients for the step and the optimizer
        # state, each partitioned from the stage that partitions it. ZeRO-2 is its estimator's 2P + 18P/N under
        # bf16/fp16 AdamW; ZeRO-3 its 18P/N + 4L (the largest module's gathered bit16 parameters and gradients).
        # Stage 3 allocates b x P/N more than that estimator counts: the bit16 parameter partition
        # (stage3.py fp16_partitioned_groups_flat) beside the gradient partition (grad_partitions_flat_buffer); it
        # is left out here as there, and model_state_rule says so with its size. Stage 0 keeps the master copy
        # only with a 16-bit model (BF16_Optimizer / FP16_Optimizer); in fp32 the model is the master. A frozen
        # parameter is cast with the model (b bytes, partitioned by ZeRO-3 as the others) and has no gradient,
        # master copy or optimizer state: the optimizer's groups are built from the trainable parameters only
        # (T of them). Its buckets are memory_buffers.
        b, stage = self._bits(), self.knobs.zero_stage
        t = params if trainable is None else trainable
        fp32 = 4 + 4 + optimizer_bytes  # master weights, fp32 gradients, optimizer state
        if stage == 0:
            return params * 4 + t * (4 + optimizer_bytes) if b == 4 else params * b + t * (b + fp32)
        if stage == 1:
            return params * b + t * (b + fp32 / n)
        if stage == 2:
            return params * b + t * (b + fp32) / n
        return t * (b + fp32) / n + 2 * b * largest["module"]

    def model_state_rule(self, optimizer_bytes, frozen=False):
        b, stage = self._bits(), self.knobs.zero_stage
        fp32 = 4 + 4 + optimizer_bytes
        bits = f"{8 * b}-bit"
        if frozen:  # T trainable of P parameters: the estimators count every parameter as trainable
            rest = {0: (f"4P + {4 + optimizer_bytes:g}T (the fp32 model is its own master)" if b == 4 else
                        f"{b}P + {b + fp32:g}T ({bits} model on every GPU; gradients, fp32 master and optimizer "
                        f"state of the trainable ones)"),
                    1: f"{b}P + {b}T + {fp32:g}T/N ({bits} model and trainable gradients on every GPU; the fp32 "
                       f"rest partitioned)",
                    2: f"{b}P + {b + fp32:g}T/N ({bits} model on every GPU; trainable gradients and the fp32 rest "
                       f"partitioned)",
                    3: f"{b + fp32:g}T/N + {2 * b}L (trainable gradients and the fp32 rest partitioned; the "
                       f"largest module gathered); stage3.py also allocates its {bits} parameter partition, {b}P/N "
                       f"more, which this count leaves out"}
            return rest[stage] + "; DeepSpeed's estimators count every parameter as trainable"
        if stage == 0:
            return (f"{fp32:g}P (the fp32 model is its own master)" if b == 4 else
                    f"{2 * b + fp32:g}P ({8 * b}-bit parameters and gradients, fp32 master, gradients and optimizer "
                    f"state on every GPU)")
        if stage == 1:
            return f"{2 * b}P + {fp32:g}P/N ({bits} parameters and gradients on every GPU; the fp32 rest partitioned)"
        # The estimators assume AdamW in 16 bits (2P + 18P/N and 18P/N + 4L)
        same = b == 2 and optimizer_bytes == 8
        if stage == 2:
            return (f"{b}P + {b + fp32:g}P/N ({bits} parameters on every GPU; gradients and the fp32 rest "
                    f"partitioned): " + ("as DeepSpeed's estimate_zero2_model_states_mem_needs" if same else
                                          "its estimate_zero2_model_states_mem_needs assumes 16-bit AdamW"))
        return (f"{b + fp32:g}P/N + {2 * b}L: " + ("as DeepSpeed's estimate_zero3_model_states_mem_needs" if same else
                                                   "its estimate_zero3_model_states_mem_needs assumes 16-bit AdamW")
                + f"; stage3.py also allocates its {bits} parameter partition, {b}P/N more, which "
                  f"{'the estimator and ' if same else ''}this count leave{'' if same else 's'} out")

    REDUCE_BUCKET = 500_000_000
    """reduce_bucket_size, DeepSpeed 0.19's default (elements)."""
    PREFETCH_BUCKET = 50_000_000
    """stage3_prefetch_bucket_size, its default (elements)."""
    PERSISTENCE = 100_000
    """stage3_param_persistence_threshold, its default (elements): a smaller parameter is never partitioned."""

    def memory_buffers(self, tensors, largest, n, trainable=None):
        # DeepSpeed 0.19, stages 1-3 with contiguous_gradients (on by default): each gradient is copied into a
        # reduce bucket allocated at reduce_bucket_size elements in the model's dtype, whatever the model's size
        # (stage_1_and_2.py setup_buckets, a second one with overlap_comm, off for stages 1 and 2 by default;
        # stage3.py one per communication dtype). ZeRO-3 also gathers up to stage3_prefetch_bucket_size elements
        # ahead of the module computing, and keeps every parameter of at most stage3_param_persistence_threshold
        # elements whole on every rank (not partitioned: its b x (1 - 1/N) beyond the partition counted).
        b, stage = self._bits(), self.knobs.zero_stage
        if stage == 0:
            return []
        bucket = self.REDUCE_BUCKET if self.knobs.reduce_bucket_elems is None else self.knobs.reduce_bucket_elems
        out = [("DeepSpeed's reduce bucket", b * bucket,
                f"reduce_bucket_size {bucket:.3g} elements in {8 * b}-bit, allocated whole (contiguous_gradients)")]
        if stage == 3:
            small = sum(t for t in tensors if t <= self.PERSISTENCE)
            out += [("ZeRO-3's prefetch", b * min(self.PREFETCH_BUCKET, sum(tensors)),
                     f"stage3_prefetch_bucket_size {self.PREFETCH_BUCKET:.3g} elements gathered ahead of the module "
                     f"computing"),
                    ("ZeRO-3's persistent parameters", b * small * (1 - 1 / n),
                     f"parameters of at most {self.PERSISTENCE:,} elements (stage3_param_persistence_threshold) kept "
                     f"whole on every rank: {small:,.0f} parameters here")]
        return out

    def comm_schedule(self):
        k = self.knobs
        # DeepSpeed 0.19's defaults, and the collectives it issues per step as counted in a real 2-rank run
        # (tests/distributed/test_deepspeed_collectives.py): reduce_bucket_size 5e8 elements; overlap_comm on only
        # for ZeRO-3. ZeRO-0 all-reduces every gradient after backward. ZeRO-1/2 all-reduce the gradients too
        # (stage_1_and_2.py average_tensor: use_multi_rank_bucket_allreduce, on by default, all-reduces each
        # bucket and each rank keeps its partition), then all-reduce the gradient norm (compute_grad_norm, on by
        # default: scaled_global_norm) and all-gather the updated parameters. ZeRO-3 all-gathers each parameter
        # for forward, keeps it for backward within stage3_max_reuse_distance (1e9 elements), reduce-scatters the
        # gradients and all-reduces the norm (stage3.py _get_norm_groups). ZeRO-0 has no norm reduction here:
        # gradient_clipping is 0 (_ds_config) unless the workload clips (one scalar more, not priced).
        return Zero(comm_backend="deepspeed", wire_scale=1.0, stage=k.zero_stage, overlap=k.zero_stage == 3,
                    norm_allreduce=k.zero_stage >= 1,
                    grad_reduce="reduce_scatter" if k.zero_stage == 3 else "all_reduce", reuse_elems=1_000_000_000,
                    bucket_elems=500_000_000 if k.reduce_bucket_elems is None else k.reduce_bucket_elems)


class DeepSpeedAdapter(DeepSpeedLaunch, DeepSpeedStrategy, DeepSpeedCost, Adapter):
    name = "deepspeed"
    summary = "DeepSpeed engine (ZeRO 0-3), launched by the deepspeed launcher"
    launcher = "deepspeed"
    distribution = "deepspeed"

    @dataclass
    class Knobs:
        zero_stage: Literal[0, 1, 2, 3] = 0
        """ZeRO stage: 0 plain data parallel, 1 partition optimizer state, 2 + gradients, 3 + parameters."""
        precision: Literal["fp32", "bf16", "fp16"] = "fp32"
        """DeepSpeed casts the model to this dtype and keeps fp32 master weights (fp16 adds dynamic loss
        scaling; DeepSpeed's CPU accelerator refuses it without oneDNN fp16)."""
        offload_optimizer: bool = False
        """ZeRO-Offload: keep optimizer state and its step on the CPU (needs zero_stage >= 1)."""
        reduce_bucket_elems: int | None = None
        """Gradient reduction bucket size in elements (ds config reduce_bucket_size), the counterpart of ddp's
        bucket_cap_mb (unset: DeepSpeed's default, 5e8)."""
        compile: bool = False
        """torch.compile the engine's module with DeepSpeed's own `engine.compile()` (its accelerator's backend:
        inductor): compiled in the warm-up, its time reported apart."""
        sync_bn: bool = False
        """Compute the model's BatchNorm statistics over every rank's samples, as torch.nn.SyncBatchNorm does
        (DeepSpeed has none of its own and leaves it to the model): each layer keeps its parameters and sums its mean
        and variance over the ranks with torch.distributed.nn's differentiable all_reduce, so the statistics are the
        single process's and the equivalence check applies. A model's own SyncBatchNorm becomes such a layer
        (torch's runs on CUDA only)."""

        def __post_init__(self):
            if self.offload_optimizer and self.zero_stage == 0:
                raise KnobError("knob 'offload_optimizer' needs zero_stage 1, 2 or 3 (ZeRO-Offload partitions the "
                                "optimizer); got zero_stage 0")
            if self.reduce_bucket_elems is not None and self.reduce_bucket_elems < 1:
                raise KnobError(f"knob 'reduce_bucket_elems' must be positive; got {self.reduce_bucket_elems}")

    def __init__(self, knobs: dict[str, Any] | None = None, device: str = "cpu"):
        super().__init__(knobs, device)
        self.engine = None
        self.timings_s: dict[str, float] = {}
        self.jit_built: list[str] = []
        self.stale_locks_removed: list[str] = []
        self.own_step: str | None = None  # the workload optimizer's own step(), where it has one (wrap)
        self.per_tensor: str | None = None  # its class among PER_TENSOR_OPTIMIZERS, where it is one (wrap)
        self.groups, self.step_hooked = 1, False  # its param groups, and whether a hook runs on its step (wrap)

    def precision(self) -> Precision:
        p = self.knobs.precision
        if p == "fp16" and self.device_kind == "cpu" and not cpu_fp16_supported():
            raise DeviceKnobError("knob 'precision' fp16 is refused by DeepSpeed's CPU accelerator on this CPU "
                                  "(no oneDNN fp16 support); use bf16 or fp32")
        return Precision(p)


ADAPTER = DeepSpeedAdapter
