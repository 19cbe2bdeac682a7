"""Under mpirun: hcnn.train collective on 2 ranks, with and without mpi4py imported first."""

import importlib.util
import sys

import pytest

from conftest import (CFG_RESNET, CFG_SMALL, HCNN, QUICK, as_kwargs, cli_env, cli_train, crcs,
                      have_mpirun, mpirun, python_env, run, same_bits, sets, trace)

pytestmark = pytest.mark.skipif(not have_mpirun(), reason="mpirun not found (openmpi-bin)")

SCRIPT = """
import os
{first}
import hcnn
rows = hcnn.train({config!r}, progress=False, overrides={overrides!r})
{after}
os.write(1, ("rank-done %d %r\\n" % (len(rows), rows[-1]["test_acc"])).encode())  # one write a rank
"""
MPI4PY_AFTER = """
from mpi4py import MPI
comm = MPI.COMM_WORLD
assert comm.allreduce(comm.rank + 1) == 3  # mpi4py still works, on its own world
assert MPI.Is_initialized() and not MPI.Is_finalized()
"""


@pytest.mark.parametrize("with_mpi4py", [True, False], ids=["mpi4py_first", "hcnn_starts_mpi"])
def test_two_ranks_train_as_the_command_line(tmp_path, with_mpi4py):
    if with_mpi4py and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py not installed (python3-mpi4py)")
    kv = ("epochs=2", "strategy=data")
    cli_train(CFG_RESNET, tmp_path / "cli", *kv, np_ranks=2)
    script = tmp_path / "train2.py"
    script.write_text(SCRIPT.format(
        first="from mpi4py import MPI" if with_mpi4py else "",
        config=CFG_RESNET,
        overrides=as_kwargs(*QUICK, "checkpoint_dir=%s" % (tmp_path / "py"), *kv),
        after=MPI4PY_AFTER if with_mpi4py else ""))
    p = run(mpirun(2, python_child=True) + [sys.executable, str(script)], env=python_env())
    done = [line for line in p.stdout.splitlines() if line.startswith("rank-done 2 ")]
    assert len(done) == 2 and done[0] == done[1], p.stdout + p.stderr  # the same global figures
    ok, why = same_bits(tmp_path / "cli" / "final.hcnn", tmp_path / "py" / "final.hcnn")
    assert ok, why
    other = [line for line in p.stdout.splitlines() if not line.startswith("rank-done ")]
    assert not other, "train() printed on stdout: %s" % other  # quiet: nothing on stdout


def test_each_rank_loader_equals_its_training_shard(hcnn, tmp_path):
    """The Loader of rank r of 2 gives the batches rank r of a 2-rank
    `mpirun hcnn train` trains on (HCNN_TRACE_BATCHES, FILE.RANK)."""
    env = cli_env()
    env["HCNN_TRACE_BATCHES"] = str(tmp_path / "trace")
    kv = ("epochs=2", "strategy=data", "augment=true", "batch_size=24")
    run(mpirun(2) + ["-x", "HCNN_TRACE_BATCHES", HCNN, "train", "--config", CFG_SMALL, "-q"] +
        sets(*QUICK, "checkpoint_dir=", *kv), env=env)
    for r in range(2):
        seen = trace(tmp_path / ("trace.%d" % r))
        assert len(seen) == 2
        for k, e in enumerate(sorted(seen)):
            got = crcs(hcnn.Loader(CFG_SMALL, rank=r, world=2, epoch=k,
                                   overrides=dict(s.split("=", 1) for s in kv)))
            assert got == seen[e], "rank %d epoch %d" % (r, k)


FAILING_OPEN = """
import os
import hcnn
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
config = {config!r} if rank != {lacking} else "lacking/run.yaml"  # missing on that "node"
try:
    hcnn.train(config, progress=False, overrides={overrides!r})
    os.write(1, b"rank-trained\\n")
except hcnn.HcnnError as e:
    os.write(1, ("rank-error %d %s\\n" % (rank, " ".join(str(e).split()))).encode())
"""


@pytest.mark.parametrize("lacking", [0, 1])
def test_open_failing_on_one_rank_ends_both(tmp_path, lacking):
    """A configuration missing on one rank's node: that rank's open fails
    and it exits; the other's collective call returns an error naming it
    (hcnn_finalize, from atexit, tells it).  It was killed by mpirun, with
    no word from hcnn, as the failing rank left without starting MPI (a
    launcher that does not watch for that leaves it waiting for ever)."""
    script = tmp_path / "fail.py"
    script.write_text(FAILING_OPEN.format(
        config=CFG_SMALL, lacking=lacking,
        overrides=as_kwargs(*QUICK, "checkpoint_dir=", "strategy=data")))
    cmd = mpirun(2, python_child=True)
    cmd[cmd.index("mpirun") + 1:cmd.index("mpirun") + 1] = [
        "--mca", "orte_abort_on_non_zero_status", "0"]
    p = run(cmd + [sys.executable, str(script)], env=python_env(), check=False, timeout=120)
    assert p.returncode not in (124, 137), "a rank waited: " + p.stdout + p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if line.startswith("rank-"))
    other = 1 - lacking
    assert len(lines) == 2, p.stdout + p.stderr
    assert ("rank-error %d" % lacking) in lines[lacking] and "run.yaml" in lines[lacking], lines
    assert lines[other].startswith("rank-error %d rank %d failed before MPI started (exit status 2)"
                                   % (other, lacking)), lines


def test_session_rank_before_the_first_collective_call(tmp_path):
    """Session.rank was 0 on every rank until a collective call started MPI
    (while .size was already the job's): `if s.rank == 0: save...` ran on
    every rank.  Both are the launcher's before MPI."""
    script = tmp_path / "rank.py"
    script.write_text("import os, hcnn\n"
                      "s = hcnn.Session(%r)\n"
                      "os.write(1, ('rank-size %%d %%d\\n' %% (s.rank, s.size)).encode())\n"
                      % CFG_SMALL)
    p = run(mpirun(2, python_child=True) + [sys.executable, str(script)], env=python_env())
    got = sorted(line for line in p.stdout.splitlines() if line.startswith("rank-size"))
    assert got == ["rank-size 0 2", "rank-size 1 2"], p.stdout + p.stderr
