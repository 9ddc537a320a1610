"""Which rank of a stalled launch stopped first (harness/launching/stalled.py): each rank's own step counter in the
progress file, and the line of the training loop its stack dump shows."""

import threading

from harness.ground.provenance import REPO
from harness.launching.stalled import describe, first_to_stop, loop_place
from harness.shared import progress as progress_file

TRAIN = str(REPO / "harness/rank/train.py")


def _dump(*frames, other_thread=True):
    """A faulthandler dump: a helper thread first, then the training thread's frames (most recent call first)."""
    lines = []
    if other_thread:
        lines += ["Thread 0x00007f0000000001 (most recent call first):",
                  '  File "/usr/lib/python3.11/threading.py", line 320 in wait',
                  '  File "/repo/harness/rank/life.py", line 175 in wait', ""]
    lines.append("Current thread 0x00007f0000000002 (most recent call first):")
    lines += [f'  File "{f}", line {n} in {fn}' for f, n, fn in frames]
    lines.append('  File "/repo/harness/rank/life.py", line 330 in _work')
    return "\n".join(lines) + "\n"


HUNG = _dump((threading.__file__, 629, "wait"), (str(REPO / "harness/rank/faults.py"), 41, "inject"),
             (TRAIN, 95, "run"))
IN_BACKWARD = _dump(("/venv/torch/autograd/graph.py", 825, "_engine_run_backward"),
                    ("/repo/adapters/base.py", 300, "backward"), (TRAIN, 112, "run"))
IN_LOADER = _dump(("/venv/torch/utils/data/dataloader.py", 1100, "_next_data"), (TRAIN, 280, "next"),
                  (TRAIN, 101, "run"))


def test_the_rank_behind_in_its_step_is_the_one_that_stopped():
    # rank 1 hung at the start of its fifth step; rank 0 went on into that step's backward, where it waits. The
    # place named is the innermost frame outside Python's own library (here the harness's; a user's model's).
    found = first_to_stop({0: 4, 1: 4}, {0: IN_BACKWARD, 1: HUNG})
    assert found == {"rank": 1, "steps": 4, "where": "inject (harness/rank/faults.py:41)"}
    assert describe(found) == ("rank 1 stopped first, after 4 step(s), in inject (harness/rank/faults.py:41): the "
                               "other ranks went further")


def test_finished_steps_count_before_the_line_and_the_loop_frame_not_a_helper_of_the_file():
    # rank 0 is in the next step's loader (an earlier line, a later step); the loader's own frame in train.py is
    # not the loop's
    assert first_to_stop({0: 5, 1: 4}, {0: IN_LOADER, 1: IN_BACKWARD})["rank"] == 1
    assert loop_place(IN_LOADER) == (101, "_next_data (dataloader.py:1100)")


def test_at_the_same_line_the_rank_not_waiting_for_its_peers_is_the_one_that_stopped():
    # FSDP2: rank 1 hangs in its model's forward while rank 0, in the same forward, waits in the next unit's
    # all-gather (a pre-forward hook); the user's frame sits inside FSDP's own frames, so only the innermost counts
    fsdp = "/venv/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard"
    gathering = _dump((threading.__file__, 629, "wait"), (f"{fsdp}/_fsdp_collectives.py", 215, "wait_for_unshard"),
                      (f"{fsdp}/_fsdp_state.py", 230, "_pre_forward"), ("/home/me/model.py", 20, "forward"),
                      (TRAIN, 95, "run"))
    hung = _dump((threading.__file__, 629, "wait"), ("/home/me/model.py", 31, "forward"),
                 (f"{fsdp}/_fsdp_state.py", 240, "_pre_forward"), (TRAIN, 95, "run"))
    found = first_to_stop({0: 3, 1: 3}, {0: gathering, 1: hung})
    assert found == {"rank": 1, "steps": 3, "where": "forward (model.py:31)"}
    assert first_to_stop({0: 3, 1: 3}, {0: gathering, 1: gathering}) is None  # both waiting: nobody
    # DDP: rank 1 hangs in a gradient hook of its own while rank 0 waits in the autograd engine, where DDP's reducer
    # waits in C++ (an outside check: both at the backward's line, neither in torch/distributed, no rank named)
    engine = ("/venv/lib/python3.11/site-packages/torch/autograd/graph.py", 825, "_engine_run_backward")
    hook = _dump((threading.__file__, 629, "wait"), ("/home/me/model.py", 34, "hook"), engine,
                 (str(REPO / "adapters/base.py"), 300, "backward"), (TRAIN, 112, "run"))
    reducing = _dump(engine, (str(REPO / "adapters/base.py"), 300, "backward"), (TRAIN, 112, "run"))
    found = first_to_stop({0: 4, 1: 4}, {0: reducing, 1: hook})
    assert found == {"rank": 1, "steps": 4, "where": "hook (model.py:34)"}
    assert first_to_stop({0: 4, 1: 4}, {0: hook, 1: hook}) is None  # both in their own code: nobody
    # In a virtual environment Python's platstdlib is the venv's lib/python3.X, which holds site-packages: torch's
    # frames are not Python's own library (they were skipped, and the waiting rank's place was its model's call)
    import sysconfig

    venv_torch = f"{sysconfig.get_paths()['platstdlib']}/site-packages/torch/distributed"
    in_venv = _dump((threading.__file__, 629, "wait"), (f"{venv_torch}/distributed_c10d.py", 4394, "all_gather_single"),
                    ("/home/me/model.py", 20, "forward"), (TRAIN, 95, "run"))
    assert first_to_stop({0: 3, 1: 3}, {0: in_venv, 1: hung})["rank"] == 1
    # a place in torch names the user's code that called it (a barrier on one rank alone was said as torch's line)
    assert loop_place(in_venv) == (95, "all_gather_single (distributed_c10d.py:4394), called from forward "
                                       "(model.py:20)")


def test_ranks_at_the_same_place_or_one_rank_alone_name_nobody():
    assert first_to_stop({0: 4, 1: 4}, {0: IN_BACKWARD, 1: IN_BACKWARD}) is None
    assert first_to_stop({0: 4, 1: 4}, {1: HUNG}) is None
    assert first_to_stop({1: 4}, {0: IN_BACKWARD, 1: HUNG}) is None  # rank 0 never counted a step here
    not_training = _dump(("/repo/harness/rank/comm_cells.py", 40, "run"))
    assert first_to_stop({0: 0, 1: 0}, {0: not_training, 1: HUNG}) is None


def test_every_rank_writes_its_own_step_counter_beside_rank_0s_progress(tmp_path):
    path = tmp_path / "progress.bin"
    progress_file.create(path, 10, ranks=3)
    assert progress_file.read_ranks(path) == {}  # nobody has joined
    writers = [progress_file.Writer(path) for _ in range(3)]
    writers[0].enabled = True  # rank 0 alone speaks in the shared phase and step
    for k, w in enumerate(writers):
        w.own_slot(k)
    writers[1].step(4)
    writers[0].step(5)
    writers[2].rank_step(7)
    assert progress_file.read_ranks(path) == {0: 5, 1: 4, 2: 7}
    assert progress_file.read(path)["step"] == 5
    progress_file.Writer(path).own_slot(3)  # a rank beyond the slots has none: nothing is written past the file
    assert path.stat().st_size == progress_file.SIZE + 3 * 8


def test_a_rank_waiting_in_a_collective_its_peers_went_past_is_told_as_a_mismatch_naming_them():
    # FSDP2, rank 1 detached a layer's output at step 3: rank 0 waits in step 3's reduce-scatter while rank 1 is in
    # step 4's forward. "rank 0 stopped first" blamed the rank that waits
    c10d = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    scatter = _dump((threading.__file__, 629, "wait"), (c10d, 4943, "reduce_scatter_tensor"), (TRAIN, 112, "run"))
    gather = _dump((threading.__file__, 629, "wait"), (c10d, 4394, "all_gather_single"), (TRAIN, 95, "run"))
    found = first_to_stop({0: 2, 1: 3}, {0: scatter, 1: gather})
    assert found["rank"] == 1 and found["behind"] == 0
    assert describe(found) == ("rank 0 waits in reduce_scatter_tensor (distributed_c10d.py:4943) in step 3 while rank "
                               "1 went on past that step without it: the ranks' collectives no longer match (a "
                               "collective rank 1 skipped, or one rank 0 added)")
    # an extra collective in one rank's forward: both wait, in the same step, each in a different one
    extra = _dump((threading.__file__, 629, "wait"), (c10d, 2800, "all_reduce"), ("/home/me/model.py", 44, "forward"),
                  (TRAIN, 95, "run"))
    found = first_to_stop({0: 3, 1: 3}, {0: gather, 1: extra})
    assert found["rank"] is None
    assert describe(found) == ("the ranks wait in different collectives (rank 0 in all_gather_single "
                               "(distributed_c10d.py:4394); rank 1 in all_reduce (distributed_c10d.py:2800), called "
                               "from forward (model.py:44)): their collectives no longer match, as where a rank skips "
                               "or adds one")
    # a barrier in one rank's forward while the other waits in the backward's all-reduce of the same step: the one
    # behind waits too, so it is no rank that stopped ("rank 1 stopped first ... in barrier (distributed_c10d.py)")
    barrier = _dump((threading.__file__, 629, "wait"), (c10d, 5356, "barrier"), ("/home/me/model.py", 47, "forward"),
                    (TRAIN, 95, "run"))
    torch_dir = "/venv/lib/python3.11/site-packages/torch"
    reducing = _dump((threading.__file__, 629, "wait"), (f"{torch_dir}/distributed/algorithms/ddp.py", 10, "wait"),
                     (f"{torch_dir}/autograd/graph.py", 825, "_engine_run_backward"), (TRAIN, 112, "run"))
    found = first_to_stop({0: 3, 1: 3}, {0: reducing, 1: barrier})
    assert describe(found) == ("the ranks wait in different collectives (rank 0 in wait (ddp.py:10); rank 1 in barrier "
                               "(distributed_c10d.py:5356), called from forward (model.py:47)): their collectives no "
                               "longer match, as where a rank skips or adds one")
    # a rank that hung in its own code is still the one behind, not a mismatch
    assert first_to_stop({0: 4, 1: 3}, {0: gather, 1: HUNG})["rank"] == 1
