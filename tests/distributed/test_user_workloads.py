"""A user's own workload through the real CLI: the docs' example file (docs/your-model.md) through every backend
with its training data read through a DataLoader, and a model with dropout, whose failed equivalence says why."""

import json

import pytest

import adapters
from conftest import REPO, read_records, run_compare

pytestmark = pytest.mark.distributed
EXAMPLE = "examples/my_model.py"


def test_the_example_runs_through_every_available_backend_reading_a_dataset_through_a_loader(tmp_path):
    out = tmp_path / "run"
    rows, proc = run_compare(out, "-w", f"{EXAMPLE}:classifier_dataset", "-o", "samples=512", "--loader-workers",
                             "1", "--steps", "4", "--warmup", "1", "--equiv-steps", "3", plots=True)
    available = [n for n in adapters.names() if adapters.availability(n, "cpu", 2)]
    assert set(rows) == set(adapters.names())
    for name, rec in rows.items():
        if name not in available:
            assert rec["status"] == "unavailable", (name, rec["status"])
            continue
        assert rec["status"] == "ok", (name, rec["reason"], rec.get("log_tail"))
        assert rec["workload"] == f"{EXAMPLE}:classifier_dataset"
        assert rec["workload_source"].startswith(f"file {REPO / EXAMPLE} (sha256 ")
        assert rec["controls"]["loader_workers"] == 1 and rec["data"]["loader_workers"] == 1
        assert rec["data"]["source"].endswith("TeacherSet through a DataLoader")
        assert rec["controls"]["workload_options"] == {"hidden": 256, "features": 32, "classes": 10, "samples": 512}
        eq = rec["equivalence"]
        if rec["controls"]["precision"] == "fp32" and name != "dp":
            assert eq["checked"] and eq["passed"], (name, rec["max_param_diff"])
        # every test sample counted once (128 held out), across however many processes evaluated
        assert rec["eval"]["test_samples"] == 128
    md = (out / "report.md").read_text()
    assert f"Workload `{EXAMPLE}:classifier_dataset`" in md
    assert out.name == "run" and (out / "throughput.png").exists()


def test_a_model_with_dropout_fails_equivalence_saying_why(tmp_path):
    path = tmp_path / "noisy.py"
    path.write_text("import torch\nfrom torch import nn\n\n\n"
                    "def noisy(p: float = 0.5):\n"
                    "    x = torch.randn(256, 8)\n"
                    "    return {'model': lambda: nn.Sequential(nn.Linear(8, 16), nn.Dropout(p), nn.Linear(16, 4)),\n"
                    "            'train': (x, (x[:, :4]).argmax(1))}\n")
    out = tmp_path / "run"
    rows, proc = run_compare(out, "-w", f"{path}:noisy", "-a", "ddp", "--steps", "3", "--warmup", "0",
                             "--equiv-steps", "3")
    eq = rows["ddp"]["equivalence"]
    assert eq["checked"] is True and eq["passed"] is False
    assert eq["why_failed"].startswith("the model is not deterministic: it has dropout (Dropout(p=0.5)); each process")
    assert "✗ in the max_param_diff column (ddp): the model is not deterministic" in (out / "report.md").read_text()
    assert "✗ in the max_param_diff column (ddp): the model is not deterministic" in proc.stdout


LORA = """import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, width, rank):
        super().__init__()
        self.base = nn.Linear(width, width, bias=False)
        self.base.weight.requires_grad_(False)  # frozen, as a LoRA fine-tune freezes the pretrained weights
        self.a = nn.Linear(width, rank, bias=False)
        self.b = nn.Linear(rank, width, bias=False)

    def forward(self, x):
        return self.base(x) + self.b(self.a(x))


def lora(width: int = 64, rank: int = 4):
    x = torch.randn(128, width)
    return {'model': lambda: nn.Sequential(LoRALinear(width, rank), nn.ReLU(), nn.Linear(width, 4)),
            'train': (x, x[:, :4].argmax(1))}
"""


def test_records_count_every_parameter_and_the_trainable_ones_apart(tmp_path):
    # A model with frozen weights: param_count counts all of them (as it always did), trainable_param_count the
    # ones that require a gradient; the report says both
    path = tmp_path / "lora.py"
    path.write_text(LORA)
    out = tmp_path / "run"
    rows, _ = run_compare(out, "-w", f"{path}:lora", "-a", "ddp", "--steps", "2", "--warmup", "1",
                          "--equiv-steps", "2")
    rec = rows["ddp"]
    assert rec["status"] == "ok", rec["reason"]
    frozen, trainable = 64 * 64, 2 * 64 * 4 + 64 * 4 + 4
    assert rec["param_count"] == frozen + trainable and rec["trainable_param_count"] == trainable
    assert rec["equivalence"]["passed"] is True
    assert f"{frozen + trainable:,} parameters, of which {trainable:,} trainable;" in (out / "report.md").read_text()
