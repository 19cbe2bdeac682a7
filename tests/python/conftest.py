"""Shared set-up of the Python package's tests (tests/integration/test_python.sh runs them).

The environment: PYTHONPATH the build tree's python/ (the package), HCNN the
hcnn program, HCNN_SRCDIR and HCNN_BUILDDIR as make check sets them;
HCNN_TEST_PRELOAD what a Python process needs in LD_PRELOAD to load the
library (a sanitizer build's runtime), which the hcnn program and mpirun
must not get."""

import os
import shutil
import subprocess
import sys
import zlib

import numpy as np  # noqa: F401  (before hcnn, as most users have it)
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("HCNN_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILDDIR = os.environ.get("HCNN_BUILDDIR") or SRCDIR
HCNN = os.environ.get("HCNN") or os.path.join(BUILDDIR, "hcnn")
PRELOAD = os.environ.get("HCNN_TEST_PRELOAD", "")
CFG_SMALL = os.path.join(SRCDIR, "configs", "synthetic_small.yaml")
CFG_RESNET = os.path.join(SRCDIR, "configs", "synthetic_resnet.yaml")
CFG_LENET = os.path.join(SRCDIR, "configs", "mnist_lenet.yaml")
MNIST_DIR = os.environ.get("HCNN_MNIST_DIR") or os.path.join(SRCDIR, "data", "mnist")
# every run here: no CSV, a few seconds at most; the BLAS kernels OpenBLAS
# loads (blas_kernels: auto measures and re-executes the command line, which
# a library in a Python process cannot: the two would compute with different
# kernels, docs/python.md)
QUICK = ("csv=", "blas_kernels=env")


def cli_env():
    """The environment of an hcnn or mpirun child: without the Python-only preload."""
    env = dict(os.environ)
    if PRELOAD:
        env.pop("LD_PRELOAD", None)
    return env


def python_env():
    """The environment of a Python child that imports hcnn."""
    env = dict(os.environ)
    if PRELOAD:
        env["LD_PRELOAD"] = PRELOAD
    return env


def run(args, timeout=120, env=None, check=True, cwd=None):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env if env is not None else cli_env(), cwd=cwd)
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(map(str, args)), p.returncode, p.stdout[-3000:],
                                p.stderr[-3000:]))
    return p


def cli(*args, **kw):
    """`hcnn ARGS...` (fails the test on a non-zero exit unless check=False)."""
    return run([HCNN] + [str(a) for a in args], **kw)


def sets(*kv):
    out = []
    for s in kv:
        out += ["--set", s]
    return out


def cli_train(config, ckdir, *kv, np_ranks=0, timeout=120):
    """hcnn train (under mpirun with np_ranks > 0), checkpoints in ckdir."""
    args = ["train", "--config", config, "-q"] + sets(*QUICK, "checkpoint_dir=%s" % ckdir, *kv)
    if np_ranks:
        return run(mpirun(np_ranks) + [HCNN] + args, timeout=timeout)
    return cli(*args, timeout=timeout)


def as_kwargs(*kv):
    """"key=value" strings as the overrides= mapping of the Python calls."""
    return dict(s.split("=", 1) for s in kv)


def same_bits(a, b):
    """The two checkpoints hold the same tensors bit for bit (hcnn diff --tol 0)."""
    p = cli("diff", a, b, "--tol", "0", check=False)
    return p.returncode == 0, (p.stdout + p.stderr).strip()[-2000:]


def mpirun(np_ranks, python_child=False):
    """The mpirun command line of the tests (tests/lib.sh's mpi_setup)."""
    cmd = ["timeout", "-k", "5", "110", "mpirun", "--oversubscribe", "--bind-to", "none",
           "-np", str(np_ranks), "-x", "OMP_NUM_THREADS=1"]
    if python_child:
        for v in ("PYTHONPATH", "HCNN_LIBRARY", "PYTHONDONTWRITEBYTECODE"):
            if v in os.environ:
                cmd += ["-x", v]
        if PRELOAD:
            cmd += ["-x", "LD_PRELOAD=%s" % PRELOAD]
    return cmd


def have_mpirun():
    return shutil.which("mpirun") is not None


os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
os.environ.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def hcnn():
    import hcnn as h
    return h


@pytest.fixture(scope="session")
def resnet_run(tmp_path_factory):
    """A short CLI run of configs/synthetic_resnet.yaml (batch-norm: the
    num_batches_tracked arrays) and its export: (checkpoint, export dir)."""
    d = tmp_path_factory.mktemp("resnet_cli")
    cli_train(CFG_RESNET, d / "ck", "epochs=1")
    ck = d / "ck" / "final.hcnn"
    cli("export", ck, d / "npy")
    return str(ck), str(d / "npy")


def mnist_present():
    return all(os.path.exists(os.path.join(MNIST_DIR, n)) or
               os.path.exists(os.path.join(MNIST_DIR, n + ".gz"))
               for n in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"))


def child_python(code, timeout=120, check=True):
    """Runs `code` in a fresh interpreter (this one's) with the package's environment."""
    return run([sys.executable, "-c", code], timeout=timeout, env=python_env(), check=check)


def trace(path):
    """{epoch: [(n, images_crc32, labels_crc32), ...]} of the batches an
    HCNN_TRACE_BATCHES file lists, in training's order."""
    out = {}
    with open(path) as f:
        for line in f:
            d = dict(kv.split("=", 1) for kv in line.split())
            out.setdefault(int(d["epoch"]), []).append(
                (int(d["n"]), int(d["images_crc32"], 16), int(d["labels_crc32"], 16)))
    return out


def crcs(loader):
    """The same figures of a Loader's batches: the CRC32s of their bytes."""
    return [(len(y), zlib.crc32(x.tobytes()), zlib.crc32(y.tobytes())) for x, y in loader]
