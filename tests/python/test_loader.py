"""hcnn.Loader: batches as views of the library's memory, in training's order."""

import gc
import warnings
import weakref

import numpy as np
import pytest

from conftest import (CFG_LENET, CFG_RESNET, CFG_SMALL, MNIST_DIR, QUICK, cli_env, crcs, mnist_present,
                      run, sets, trace, HCNN)


def batches(loader):
    return [(x.copy(), y.copy()) for x, y in loader]


def test_shapes_dtypes_and_views(hcnn):
    loader = hcnn.Loader(CFG_SMALL)
    assert len(loader) == 16 and loader.shape == (1, 12, 12)  # 512 samples, batch 32
    n = 0
    for x, y in loader:
        assert x.shape == (32, 1, 12, 12) and x.dtype == np.float32 and x.flags.c_contiguous
        assert y.shape == (32,) and y.dtype == np.int32
        assert not x.flags.owndata and not y.flags.owndata
        assert x.flags.writeable and y.flags.writeable  # the caller's until released
        assert ((y >= 0) & (y < 4)).all() and np.isfinite(x).all()
        n += 1
    assert n == len(loader)
    test = hcnn.Loader(CFG_SMALL, split="test")
    assert sum(len(y) for _, y in test) == 128


def test_held_batch_survives_three_more_and_is_released_when_dropped(hcnn):
    from hcnn import _loader
    loader = hcnn.Loader(CFG_SMALL)
    it = iter(loader)
    x0, y0 = next(it)
    kx, ky = x0.copy(), y0.copy()
    owner = weakref.ref(_loader.owner_of(x0))
    before = _loader.released
    for _ in range(3):
        x, y = next(it)
        x[:] = -1.0  # ours to write: must not reach the held batch
    del x, y
    gc.collect()
    assert _loader.released >= before + 3
    assert np.array_equal(x0, kx) and np.array_equal(y0, ky)
    labels_only = y0
    del x0
    gc.collect()
    assert owner() is not None  # the labels still hold the batch
    assert np.array_equal(labels_only, ky)
    del labels_only, y0
    gc.collect()
    assert owner() is None
    rest = sum(1 for _ in it)
    assert rest == len(loader) - 4


def test_iter_restarts_the_epoch_and_epochs_differ(hcnn):
    loader = hcnn.Loader(CFG_SMALL)
    a, b = batches(loader), batches(loader)
    assert len(a) == len(b) == 16
    assert all(np.array_equal(p[0], q[0]) and np.array_equal(p[1], q[1]) for p, q in zip(a, b))
    loader.epoch = 1
    c = batches(loader)
    assert not all(np.array_equal(p[1], q[1]) for p, q in zip(a, c))  # reshuffled
    again = batches(hcnn.Loader(CFG_SMALL, epoch=1))
    assert all(np.array_equal(p[0], q[0]) for p, q in zip(c, again))
    # the test split: in order whatever the epoch
    t0 = batches(hcnn.Loader(CFG_SMALL, split="test", epoch=0))
    t1 = batches(hcnn.Loader(CFG_SMALL, split="test", epoch=2))
    assert all(np.array_equal(p[0], q[0]) for p, q in zip(t0, t1))


def test_shards_of_two_ranks_make_the_global_batch(hcnn):
    whole = batches(hcnn.Loader(CFG_SMALL, world=1))
    r0 = batches(hcnn.Loader(CFG_SMALL, rank=0, world=2))
    r1 = batches(hcnn.Loader(CFG_SMALL, rank=1, world=2))
    assert len(r0) == len(r1) == len(whole)
    for (x, y), (x0, y0), (x1, y1) in zip(whole, r0, r1):
        assert len(y0) == len(y1) == len(y) // 2
        assert np.array_equal(np.concatenate([x0, x1]), x)
        assert np.array_equal(np.concatenate([y0, y1]), y)


def test_bad_arguments_named(hcnn):
    with pytest.raises(ValueError, match="rank"):
        hcnn.Loader(CFG_SMALL, rank=1, world=1)
    with pytest.raises(ValueError, match="world"):
        hcnn.Loader(CFG_SMALL, world=0)
    with pytest.raises(ValueError, match="split"):
        hcnn.Loader(CFG_SMALL, split="dev")
    with pytest.raises(hcnn.HcnnValueError, match="no_such_key"):
        hcnn.Loader(CFG_SMALL, no_such_key=1)
    with pytest.raises(hcnn.HcnnValueError, match="epoch"):  # the config trains 3 epochs
        hcnn.Loader(CFG_SMALL, epoch=3)
    with pytest.raises(hcnn.HcnnValueError, match="world"):  # more ranks than samples a batch
        hcnn.Loader(CFG_SMALL, rank=0, world=64)
    loader = hcnn.Loader(CFG_SMALL)
    with pytest.raises(ValueError, match="epoch"):
        loader.epoch = -2


def test_torch_from_numpy_shares_the_batch(hcnn):
    torch = pytest.importorskip("torch")
    x, y = next(iter(hcnn.Loader(CFG_SMALL)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "The given NumPy array is not writable"
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    assert tx.data_ptr() == x.ctypes.data and ty.data_ptr() == y.ctypes.data
    assert tx.dtype == torch.float32 and ty.dtype == torch.int32
    ty.long()  # what cross_entropy wants


def test_loader_closes_and_keeps_held_batches(hcnn):
    loader = hcnn.Loader(CFG_SMALL)
    it = iter(loader)
    x, y = next(it)
    keep = x.copy()
    loader.close()
    assert np.array_equal(x, keep)
    with pytest.raises(ValueError, match="closed"):
        next(it)
    with pytest.raises(ValueError, match="closed"):
        iter(loader)
    with hcnn.Session(CFG_SMALL) as s:
        assert len(hcnn.Loader(s)) == 16
        with pytest.raises(ValueError, match="Session"):
            hcnn.Loader(s, epochs=2)


@pytest.mark.skipif(not mnist_present(), reason="no MNIST in %s (scripts/fetch-data.sh)" % MNIST_DIR)
def test_mnist_normalised(hcnn):
    loader = hcnn.Loader(CFG_LENET, split="test", data_dir=MNIST_DIR)
    assert loader.shape == (1, 28, 28) and len(loader) > 0
    xs = np.concatenate([x for x, _ in loader])
    assert xs.shape[0] == 10000
    # MNIST's normalisation (0.1307, 0.3081): mean 0, standard deviation 1 over the set
    assert abs(float(xs.mean())) < 0.05 and abs(float(xs.std()) - 1.0) < 0.05


@pytest.mark.parametrize("config,kv", [
    (CFG_SMALL, ("epochs=2",)),
    (CFG_SMALL, ("epochs=2", "augment=true", "batch_size=24")),  # a short last batch
    (CFG_RESNET, ("epochs=2", "shuffle=false")),
], ids=["small", "small_augment_b24", "resnet_unshuffled"])
def test_equals_what_train_trains_on(hcnn, tmp_path, config, kv):
    """hcnn train's own record of its batches (HCNN_TRACE_BATCHES: CRC32s of
    each batch as trained on) against the Loader's, epoch by epoch."""
    env = cli_env()
    env["HCNN_TRACE_BATCHES"] = str(tmp_path / "trace")
    run([HCNN, "train", "--config", config, "-q"] + sets(*QUICK, "checkpoint_dir=", *kv), env=env)
    seen = trace(tmp_path / "trace")
    assert len(seen) == 2, sorted(seen)
    overrides = dict(s.split("=", 1) for s in kv)
    for k, e in enumerate(sorted(seen)):
        loader = hcnn.Loader(config, epoch=k, overrides=overrides)
        got = crcs(loader)
        assert len(got) == len(loader) == len(seen[e])
        assert got == seen[e], "epoch %d" % k


def test_epochs_restart_and_iterators_are_independent(hcnn):
    loader = hcnn.Loader(CFG_SMALL)
    whole = batches(loader)
    for _ in loader:  # an epoch left after one batch: the next iter() starts it over
        break
    assert all(np.array_equal(p[0], q[0]) for p, q in zip(whole, batches(loader)))
    it1 = iter(loader)
    head = [(x.copy(), y.copy()) for x, y in (next(it1) for _ in range(3))]
    second = batches(loader)  # while it1 is going: a loader of its own
    rest = [(x.copy(), y.copy()) for x, y in it1]
    assert len(second) == len(head) + len(rest) == len(whole)
    for p, q, r in zip(whole, second, head + rest):
        assert np.array_equal(p[0], q[0]) and np.array_equal(p[0], r[0])
        assert np.array_equal(p[1], q[1]) and np.array_equal(p[1], r[1])
    loader.epoch = 2
    e2 = batches(loader)
    assert all(np.array_equal(p[0], q[0]) for p, q in zip(e2, batches(hcnn.Loader(CFG_SMALL, epoch=2))))
    loader.epoch = 0
    assert all(np.array_equal(p[0], q[0]) for p, q in zip(whole, batches(loader)))


def test_an_iterator_never_started_does_not_hold_the_loader(hcnn):
    loader = hcnn.Loader(CFG_SMALL)
    first = batches(loader)
    iter(loader)  # dropped at once, never started
    it = iter(loader)
    assert it is not None and loader._h_user() is it  # on the loader's own, restarted
    assert all(np.array_equal(p[1], q[1]) for p, q in zip(first, [(x, y) for x, y in it]))
