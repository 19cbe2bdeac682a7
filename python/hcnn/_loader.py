"""hcnn's data loader as an iterable of NumPy batches (views of the C memory)."""

import ctypes
import weakref
from ctypes import byref, c_int, c_void_p

import numpy as np

from . import _lib
from ._lib import lib
from ._session import Session, int_arg

_SPLITS = {"train": _lib.SPLIT_TRAIN, "test": _lib.SPLIT_TEST}
_F32 = np.dtype("<f4")
_I32 = np.dtype("<i4")

released = 0  # batches handed back to the library (the tests count them)


class _BatchesHandle(_lib.Handle):
    _order = 0  # closed first at exit
    _free = lib.hcnn_batches_close

    def __init__(self, ptr, session):
        super().__init__(ptr)
        self.session = session  # the Session stays open while its loaders are


class _BatchOwner:
    """Owns one hcnn_batch: released when the last array over it goes."""
    __slots__ = ("ptr", "parent", "index", "__weakref__")

    def __init__(self, ptr, parent, index):
        self.ptr = ptr
        self.parent = parent
        self.index = index

    def __del__(self, _release=_lib.pylib.hcnn_batch_release):
        global released
        ptr, self.ptr = self.ptr, None
        if ptr:
            try:
                with self.parent.lock:  # not while the loader assembles the next batch
                    _release(ptr)
                released += 1
            except Exception:  # interpreter teardown
                pass


_BUF = {}  # nbytes -> the ctypes array type of that many bytes


def _buffer(addr, nbytes, owner):
    t = _BUF.get(nbytes)
    if t is None:
        t = _BUF[nbytes] = ctypes.c_char * nbytes
    buf = t.from_address(addr)
    buf._hcnn_owner = owner
    return buf


def _wrap(addr, h):
    b = _lib.Batch.from_address(addr)
    n = b.n
    owner = _BatchOwner(addr, h, b.index)
    shape = (n, b.c, b.h, b.w)
    if n <= 0:
        return np.zeros(shape, _F32), np.zeros((0,), _I32)
    return (np.ndarray(shape, _F32, buffer=_buffer(b.images, n * b.c * b.h * b.w * 4, owner)),
            np.ndarray((n,), _I32, buffer=_buffer(b.labels, n * 4, owner)))


def owner_of(array):
    """The object an array from a Loader keeps alive (None for another array)."""
    a = array
    while a is not None:
        o = getattr(a, "_hcnn_owner", None)
        if o is not None:
            return o
        a = getattr(a, "base", None) if not isinstance(a, memoryview) else a.obj
    return None


class Loader:
    """The batches `hcnn train` trains on: iterating gives (images, labels),
    float32 [n, c, h, w] (normalised, augmented as training does) and int32
    [n], for `split` ("train" or "test") of epoch `epoch` as rank `rank` of
    `world` data-parallel ranks sees them (its shard of each global batch),
    in training's order for the configuration's seed, batch_size, shuffle
    and augment.

    Each array is a view of the batch's memory in the library (no copy:
    owndata is False; torch.from_numpy shares it), the caller's to read and
    write until the last array over the batch is gone; then the batch goes
    back to the library.  len(loader) is the number of batches in an epoch,
    loader.shape the per-sample (c, h, w); each iter() starts the epoch over
    (set loader.epoch to move on to another; it must be below the
    configuration's epochs); the data set is read once.  Not collective, no
    MPI: under mpirun each rank may read its own shard (rank, world) or any
    other."""

    def __init__(self, config, split="train", rank=0, world=1, epoch=0, *, overrides=None,
                 **kwargs):
        if not isinstance(split, str) or split not in _SPLITS:
            raise ValueError("split: %r is not a split (expected 'train' or 'test')" % (split,))
        world = int_arg("world", world, 1, None, "a loader needs world >= 1 ranks")
        rank = int_arg("rank", rank, 0, world - 1,
                       "not a rank of world=%d (expected 0 to %d)" % (world, world - 1))
        epoch = int_arg("epoch", epoch, 0, None, "epochs count from 0")
        if isinstance(config, Session):
            if overrides or kwargs:
                raise ValueError("overrides: give them to the Session, not with one")
            self._session, self._own = config, False
        else:
            self._session, self._own = Session(config, overrides=overrides, **kwargs), True
        self.split, self.rank, self.world = split, rank, world
        self._epoch = epoch
        self._active = weakref.WeakSet()
        try:
            # the loader's own hcnn_batches: the data set read once, each
            # epoch restarted on it (hcnn_batches_restart)
            self._h = self._open(epoch)
        except BaseException:
            self.close()
            raise
        self._h_epoch = epoch               # the epoch self._h stands at the start of, or None
        self._h_user = lambda: None         # (a weak reference to) the iterator going through it
        h = self._h
        self._len = lib.hcnn_batches_count(h.ptr)
        c, hh, w = c_int(), c_int(), c_int()
        lib.hcnn_batches_shape(h.ptr, byref(c), byref(hh), byref(w))
        self.shape = (c.value, hh.value, w.value)

    def _open(self, epoch):
        out = c_void_p()
        _lib.check(lib.hcnn_batches_open(self._session.ptr, _SPLITS[self.split], self.rank,
                                         self.world, epoch, byref(out)))
        h = _BatchesHandle(out.value, self._session)
        self._active.add(h)
        return h

    @property
    def epoch(self):
        """The epoch the next iter() goes through (0-based)."""
        return self._epoch

    @epoch.setter
    def epoch(self, value):
        self._epoch = int_arg("epoch", value, 0, None, "epochs count from 0")

    @property
    def session(self):
        return self._session

    def __len__(self):
        return self._len

    def __iter__(self):
        if self._session.closed or not self._h.ptr:
            raise ValueError("loader: it is closed")
        epoch = self._epoch
        g = self._h_user()
        if g is not None and g.gi_frame is not None:
            # an iterator over the loader's own is alive and not at its end:
            # this one gets a loader of its own (the data set read again)
            return self._batches(self._open(epoch), own=False)
        if self._h_epoch != epoch:
            if hasattr(lib, "hcnn_batches_restart"):
                _lib.check(lib.hcnn_batches_restart(self._h.ptr, epoch))
            else:  # a library without it: the epoch opened anew
                old, self._h = self._h, self._open(epoch)
                old.close()
        self._h_epoch = None
        gen = self._batches(self._h, own=True)
        self._h_user = weakref.ref(gen)
        return gen

    def _batches(self, h, own):
        nxt, out, lock = lib.hcnn_batches_next, c_void_p(), h.lock
        ref = byref(out)
        try:
            while True:
                with lock:
                    if not h.ptr:
                        raise ValueError("loader: it was closed during the epoch")
                    rc = nxt(h.ptr, ref)
                if rc:
                    raise _lib.error(rc)
                if not out.value:
                    break
                # no local name keeps the arrays: the batch goes back when the caller drops them
                yield _wrap(out.value, h)
        finally:
            if not own:
                h.close()  # batches not yet released stay valid until released

    def close(self):
        """Closes the loader (and its Session, when it opened one).  Batches
        still held stay valid."""
        for h in list(self._active):
            h.close()
        if self._own:
            self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<hcnn.Loader %s split=%s rank=%d world=%d epoch=%d: %d batches of %s samples>" % (
            self._session.config, self.split, self.rank, self.world, self._epoch, self._len,
            "x".join(map(str, self.shape)))
