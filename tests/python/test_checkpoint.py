"""Checkpoints from Python: load_checkpoint against `hcnn export`, save_checkpoint's round trip."""

import gc
import os
import weakref

import numpy as np
import pytest

from conftest import CFG_RESNET, cli


def manifest(npy_dir):
    with open(os.path.join(npy_dir, "manifest.txt")) as f:
        return [line.split()[0] for line in f if line.strip()]


def test_load_equals_export_bit_for_bit(hcnn, resnet_run):
    ck_path, npy = resnet_run
    ck = hcnn.load_checkpoint(ck_path)
    names = manifest(npy)
    assert list(ck) == names  # the same names, in the file's (state_dict's) order
    assert any(n.endswith(".num_batches_tracked") for n in names)
    for name in names:
        want = np.load(os.path.join(npy, name + ".npy"))
        got = ck[name]
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), name
    assert ck["bn1.num_batches_tracked"].dtype == np.int64
    assert ck["bn1.num_batches_tracked"].shape == ()
    assert ck.meta["step"] == int(ck["bn1.num_batches_tracked"])
    assert ck.meta["model"] == "tiny_resnet" and ck.meta["epoch"] == 1
    assert isinstance(ck.meta["seed"], int) and ck.path == ck_path
    # the model hashes from their hex digits (a hash of decimal digits only
    # was read as a decimal number, one with an "e" as a float)
    text = dict(line.split("=", 1) for line in ck.meta_text.splitlines() if "=" in line)
    assert ck.meta["model_hash"] == int(text["model_hash"], 16)
    assert ck.meta["model_hash_v1"] == int(text["model_hash_v1"], 16)
    from hcnn._checkpoint import parse_meta
    meta = parse_meta("model_hash=0000000000000123\nmodel_hash_v1=00000000000001e5\n"
                      "run_id=1234\nslurm_job=77\nstep=5\nlr=0.5\n")
    assert meta == {"model_hash": 0x123, "model_hash_v1": 0x1e5, "run_id": "1234",
                    "slurm_job": "77", "step": 5, "lr": 0.5}


def test_arrays_are_read_only_views_that_keep_the_checkpoint(hcnn, resnet_run):
    ck = hcnn.load_checkpoint(resnet_run[0])
    w = ck["conv1.weight"]
    assert not w.flags.owndata and not w.flags.writeable and w.flags.c_contiguous
    with pytest.raises(ValueError):
        w[0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError):
        w.flags.writeable = True
    with pytest.raises(TypeError):
        ck["conv1.weight"] = w  # a read-only mapping
    handle = weakref.ref(ck._handle)
    copy = w.copy()
    del ck
    gc.collect()
    assert handle() is not None  # the array keeps the C checkpoint
    assert np.array_equal(w, copy)
    del w
    gc.collect()
    assert handle() is None  # freed with the last array


def test_save_round_trip_is_byte_identical(hcnn, resnet_run, tmp_path):
    ck_path, npy = resnet_run
    new = tmp_path / "saved.hcnn"
    assert hcnn.save_checkpoint(new, hcnn.load_checkpoint(ck_path), CFG_RESNET) == str(new)
    cli("export", new, tmp_path / "npy2")
    assert manifest(tmp_path / "npy2") == manifest(npy)
    for name in manifest(npy):
        a = (tmp_path / "npy2" / (name + ".npy")).read_bytes()
        b = open(os.path.join(npy, name + ".npy"), "rb").read()
        if name.endswith(".num_batches_tracked"):
            continue  # the step: 0 in a written checkpoint
        assert a == b, name
    saved = hcnn.load_checkpoint(new)
    assert saved.meta["step"] == 0 and saved.meta["epoch"] == 0


def test_save_converts_float64_and_torch_tensors(hcnn, resnet_run, tmp_path):
    ck = hcnn.load_checkpoint(resnet_run[0])
    f64 = {k: np.array(v, dtype=np.float64) for k, v in ck.items()}
    hcnn.save_checkpoint(tmp_path / "f64.hcnn", f64, CFG_RESNET)
    back = hcnn.load_checkpoint(tmp_path / "f64.hcnn")
    for k, v in ck.items():
        if not k.endswith(".num_batches_tracked"):
            assert back[k].tobytes() == v.tobytes(), k
    torch = pytest.importorskip("torch")
    sd = {k: torch.tensor(np.array(v), requires_grad=v.dtype == np.float32) for k, v in ck.items()}
    hcnn.save_checkpoint(tmp_path / "torch.hcnn", sd, CFG_RESNET)
    back = hcnn.load_checkpoint(tmp_path / "torch.hcnn")
    assert all(back[k].tobytes() == ck[k].tobytes() for k in ck if "num_batches" not in k)


def test_save_refuses_what_import_refuses(hcnn, resnet_run, tmp_path):
    ck = dict(hcnn.load_checkpoint(resnet_run[0]))
    target = tmp_path / "bad.hcnn"
    missing = {k: v for k, v in ck.items() if k != "fc.bias"}
    with pytest.raises(hcnn.HcnnError, match="fc.bias"):
        hcnn.save_checkpoint(target, missing, CFG_RESNET)
    extra = dict(ck, **{"fc.extra": np.zeros(3, np.float32)})
    with pytest.raises(hcnn.HcnnError, match="fc.extra"):
        hcnn.save_checkpoint(target, extra, CFG_RESNET)
    shape = dict(ck, **{"fc.bias": np.zeros(5, np.float32)})
    with pytest.raises(hcnn.HcnnError, match="fc.bias"):
        hcnn.save_checkpoint(target, shape, CFG_RESNET)
    nan = dict(ck, **{"fc.bias": np.full(ck["fc.bias"].shape, np.nan, np.float32)})
    with pytest.raises(hcnn.HcnnError, match="fc.bias"):
        hcnn.save_checkpoint(target, nan, CFG_RESNET)
    assert not target.exists()  # nothing written unless all is valid


def test_save_checks_python_arguments_first(hcnn, tmp_path):
    no_config = tmp_path / "no-such.yaml"  # C would name this file: it is never reached
    for bad, word in [(["not", "a", "mapping"], "tensors"), ({1: np.zeros(1)}, "name"),
                      ({"x": np.zeros((1,) * 5, np.float32)}, "dimensions"),
                      ({"x": np.array(["a"])}, "dtype")]:
        with pytest.raises(ValueError, match=word) as e:
            hcnn.save_checkpoint(tmp_path / "x.hcnn", bad, no_config)
        assert not isinstance(e.value, hcnn.HcnnError)


def test_meta_numbers(hcnn):
    from hcnn._checkpoint import parse_meta
    m = parse_meta("model=lenet5\nepoch=3\nlr=0.05\nrun_id=20261128T1-ab\nhash=00ff\nx=1e-3\n")
    assert m == {"model": "lenet5", "epoch": 3, "lr": 0.05, "run_id": "20261128T1-ab",
                 "hash": "00ff", "x": 0.001}
