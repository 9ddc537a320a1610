"""Build apex 25.05's `amp_C` CUDA extension alone, for this GPU's architecture only.

    python harness/gpu/build_amp_c.py APEX_SOURCE_DIR      (TORCH_CUDA_ARCH_LIST, MAX_JOBS as torch reads them)

apex.amp and apex.parallel.DistributedDataParallel need only `apex_C` (flatten, C++: `--cpp_ext`) and `amp_C` (the
loss-scale and multi-tensor kernels); a full `--cuda_ext` build of 25.05 compiles eleven extensions, aborts unless
nvcc's version equals torch.version.cuda exactly, and fused_dense/mlp still call Tensor::type() (fixed upstream only
after 25.05). This builds amp_C from the same sources and flags as 25.05's setup.py (its amp_C block), offline, with
the machine's own torch, and installs it beside apex.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

SOURCES = ["amp_C_frontend.cpp", "multi_tensor_sgd_kernel.cu", "multi_tensor_scale_kernel.cu",
           "multi_tensor_axpby_kernel.cu", "multi_tensor_l2norm_kernel.cu", "multi_tensor_l2norm_kernel_mp.cu",
           "multi_tensor_l2norm_scale_kernel.cu", "multi_tensor_lamb_stage_1.cu", "multi_tensor_lamb_stage_2.cu",
           "multi_tensor_adam.cu", "multi_tensor_adagrad.cu", "multi_tensor_novograd.cu", "multi_tensor_lamb.cu",
           "multi_tensor_lamb_mp.cu", "update_scale_hysteresis.cu"]
"""25.05's setup.py, the CUDAExtension named amp_C, in its order."""

SETUP = '''
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

macros = ["-DVERSION_GE_1_1", "-DVERSION_GE_1_3", "-DVERSION_GE_1_5"]  # 25.05's version_dependent_macros
setup(name="apex-amp-c", version="25.5", ext_modules=[CUDAExtension(
    "amp_C", {sources!r},
    extra_compile_args={{"cxx": ["-O3"] + macros, "nvcc": ["-lineinfo", "-O3", "--use_fast_math"] + macros}})],
    cmdclass={{"build_ext": BuildExtension}})
'''


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: build_amp_c.py APEX_SOURCE_DIR", file=sys.stderr)
        return 2
    csrc = Path(sys.argv[1]).resolve() / "csrc"
    missing = [s for s in SOURCES if not (csrc / s).exists()]
    if missing:
        print(f"build_amp_c: {csrc} lacks {', '.join(missing)} (not apex 25.05?)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="amp_c-") as tmp:
        (Path(tmp) / "setup.py").write_text(SETUP.format(sources=[str(csrc / s) for s in SOURCES]))
        return subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                               "--no-build-isolation", "-v", tmp]).returncode


if __name__ == "__main__":
    sys.exit(main())
