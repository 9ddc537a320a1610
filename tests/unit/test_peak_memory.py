"""The CPU peak memory counts what training allocates, not the shared libraries' pages mapped from files."""

import json
import subprocess
import sys
import textwrap

import pytest

from harness.rank.measure import PeakMemory

MiB = 2**20

# Run in a fresh interpreter: the high-water mark is per process, and pytest's own would blur the figures.
PROBE = textwrap.dedent("""
    import json, mmap, sys
    import numpy as np
    from harness.rank.measure import PeakMemory

    memory = PeakMemory("cpu")
    memory.reset()
    base = memory.read()
    with open(sys.argv[1], "rb") as f:  # a 96 MiB file read through a mapping: file-backed pages, like a library
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        touched = sum(m[i] for i in range(0, len(m), 4096))
    after_file = memory.read()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB allocated and written: anonymous memory, like a tensor
    del block
    after_alloc = memory.read()
    print(json.dumps({"kind": memory.kind, "base": base, "after_file": after_file, "after_alloc": after_alloc,
                      "file_bytes": memory.file_bytes}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_file_backed_pages_are_left_out_and_allocations_are_counted(tmp_path):
    data = tmp_path / "mapped.bin"
    data.write_bytes(b"\1" * (96 * MiB))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(data)], capture_output=True, text=True, check=True)
    got = json.loads(proc.stdout)
    assert got["kind"] == "rss_vmhwm_minus_file"
    # the mapped file raised the resident set by 96 MiB but not the peak
    assert got["after_file"] - got["base"] < 8 * MiB, got
    assert got["file_bytes"] >= 96 * MiB, got
    # a freed 64 MiB allocation stays in the peak
    assert 60 * MiB <= got["after_alloc"] - got["after_file"] < 72 * MiB, got


def test_a_held_peak_is_the_floor():
    memory = PeakMemory("cpu")
    memory.hold(2**50)
    assert memory.read() == 2**50


def test_the_report_says_how_peak_memory_was_measured_and_what_it_left_out():
    from harness.reports.run_report import memory_kind
    from harness.reports.run_rows import summarise

    def launch(adapter, label, repeat, file_bytes):
        return {"adapter": adapter, "label": label, "status": "ok", "repeat": repeat, "samples_per_s": 1.0,
                "samples_per_s_per_device": 0.5, "step_times_s": [0.1], "peak_memory_bytes": 1, "final_loss": 1.0,
                "topology": {"devices_used": 2}, "time_to_first_step_s": 1.0, "reason": None,
                "peak_memory_kind": "rss_vmhwm_minus_file",
                "peak_memory_file_bytes_per_rank": file_bytes}

    # the largest over every launch, as the peak itself is (it was the first launch's: 1 MiB low at times)
    rows = [summarise([launch("ddp", "ddp", 0, [200 * MiB, 210 * MiB]), launch("ddp", "ddp", 1, [212 * MiB, None])]),
            summarise([launch("deepspeed", "deepspeed:zero_stage=2", 0, [250 * MiB, 251 * MiB])])]
    text = memory_kind(rows)
    assert "minus its file-backed pages" in text
    assert text.endswith("left out, MiB per rank (max): ddp 212, deepspeed:zero_stage=2 251")
    # a report from before the change says what its figure includes, and nothing about a part left out
    old = memory_kind([{"first": {"adapter": "ddp", "peak_memory_kind": "rss_vmhwm"}}])
    assert "including the pages of shared libraries" in old and "MiB per rank" not in old
