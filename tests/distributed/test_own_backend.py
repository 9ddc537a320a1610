"""Adding a backend is one file and one registry line (issue 68): a minimal backend written in a temporary directory
outside this repository, registered by one entry-point line of its own (the `compare.adapters` group an installed
package uses; adapters/__init__.py's `_MODULES` is the same line for a backend inside the repository), runs through
`compare run` on CPU, world size 2, gloo, and matches the single-process reference: the harness, the launch, the
ranks and the report need nothing else."""

import os
import textwrap

import pytest

from conftest import compare_cli, run_compare

pytestmark = pytest.mark.distributed

BACKEND = '''
"""DistributedDataParallel under torchrun, as a backend of its own: the whole of it."""

from adapters.base import Adapter, LaunchPlan
from adapters.launchers import torchrun
from adapters.rank_side import init_process_group_from_env


class Mini(Adapter):
    name = "mini"
    summary = "DistributedDataParallel under torchrun, from a file outside the repository"
    launcher = "torchrun"

    def launch(self, spec_path, spec):
        return LaunchPlan(torchrun(spec.world_size, spec_path))

    def setup(self, spec):
        self.info = init_process_group_from_env(spec.device)
        return self.info

    def wrap(self, model, optimizer):
        from torch.nn.parallel import DistributedDataParallel

        return super().wrap(DistributedDataParallel(model), optimizer)

    def all_reduce_mean(self, tensor):
        import torch.distributed as dist

        dist.all_reduce(tensor)
        return tensor / self.info.world_size

    def barrier(self):
        import torch.distributed as dist

        dist.barrier()

    def teardown(self):
        import torch.distributed as dist

        dist.destroy_process_group()


ADAPTER = Mini
'''


def test_a_backend_in_one_file_and_one_registry_line_runs_through_compare_run(tmp_path):
    site = tmp_path / "site"
    (site / "mini_backend-0.1.dist-info").mkdir(parents=True)
    (site / "mini_backend.py").write_text(textwrap.dedent(BACKEND))
    (site / "mini_backend-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: mini-backend\n"
                                                                  "Version: 0.1\n")
    (site / "mini_backend-0.1.dist-info" / "entry_points.txt").write_text(
        "[compare.adapters]\nmini = mini_backend:ADAPTER\n")  # the registry line
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)}

    listed = compare_cli("list", env=env)
    assert listed.returncode == 0 and "mini" in listed.stdout, listed.stdout + listed.stderr
    rows, _ = run_compare(tmp_path / "run", "-a", "mini", "-w", "digits", "--steps", "3", "--warmup", "1",
                          "--equiv-steps", "2", env=env)
    rec = rows["mini"]
    assert rec["status"] == "ok", (rec.get("reason"), rec.get("log_tail"))
    topo = rec["topology"]
    assert "torch.distributed.run" in topo["launcher_argv"] and topo["processes"] == 2 and topo["backend"] == "gloo"
    assert rec["equivalence"]["checked"] is True and rec["equivalence"]["passed"] is True, rec["equivalence"]
    assert rec["samples_per_s"] > 0 and "| mini |" in (tmp_path / "run" / "report.md").read_text()
