"""Checkpoints: read as NumPy views of the C memory, written through hcnn's import validation."""

import collections.abc
import ctypes
import os
import re
from ctypes import byref, c_void_p

import numpy as np

from . import _lib
from ._lib import lib
from ._session import opened, path_arg

_NP_DTYPE = {_lib.DTYPE_F32: np.dtype("<f4"), _lib.DTYPE_F64: np.dtype("<f8"),
             _lib.DTYPE_I64: np.dtype("<i8")}


class _CheckpointHandle(_lib.Handle):
    _order = 2  # memory only: may be freed after hcnn_finalize
    _free = lib.hcnn_checkpoint_free


_INT = re.compile(r"^[+-]?[0-9]+$")
_FLOAT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")


# META keys that are not decimal numbers: the model hashes (16 hex digits,
# as an int), and names kept as text whatever they look like (a run id or
# model name of digits, a Slurm job id)
_HEX_KEYS = ("model_hash", "model_hash_v1")
_TEXT_KEYS = ("model", "run_id", "parent_run", "slurm_job", "dataset")


def _meta_value(key, s):
    if key in _HEX_KEYS:
        try:
            return int(s, 16)
        except ValueError:
            return s
    if key in _TEXT_KEYS:
        return s
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return s


def parse_meta(text):
    """A META section's "key=value" lines as a dict (numbers as int or float,
    the model hashes as ints from their hex digits, names as text)."""
    meta = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            meta[k] = _meta_value(k, v)
    return meta


def view(addr, nbytes, dtype, shape, owner, writeable):
    """An ndarray over nbytes at addr, whose base chain holds `owner`."""
    buf = (ctypes.c_char * nbytes).from_address(addr)
    buf._hcnn_owner = owner
    if writeable:
        return np.ndarray(shape, dtype, buffer=buf)
    # frombuffer over a read-only memoryview: WRITEABLE cannot be set back to True
    mv = memoryview(buf).toreadonly()
    return np.frombuffer(mv, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)


class Checkpoint(collections.abc.Mapping):
    """A checkpoint's model, read-only: name -> numpy.ndarray (float32, C
    order, PyTorch's names and shapes; int64 scalars
    <layer>.num_batches_tracked), in the file's order.  The arrays are views
    of the checkpoint's memory in the library: the C object lives until the
    Checkpoint and every array taken from it are gone.  .meta: the META
    section (model, epoch, step, seed, ...) as a dict; .path: the file."""

    def __init__(self, path):
        p = path_arg("path", path)
        out = c_void_p()
        _lib.check(lib.hcnn_checkpoint_read(p, byref(out)))
        h = _CheckpointHandle(out.value)
        self._handle = h
        self.path = os.fsdecode(p)
        meta = lib.hcnn_checkpoint_meta(h.ptr)
        self.meta_text = meta.decode("utf-8", "replace") if meta else ""
        self.meta = parse_meta(self.meta_text)
        arrays = {}
        a = _lib.Array()
        for i in range(lib.hcnn_checkpoint_count(h.ptr)):
            _lib.check(lib.hcnn_checkpoint_array(h.ptr, i, byref(a)))
            dtype = _NP_DTYPE.get(a.dtype)
            if dtype is None or not 0 <= a.ndim <= 4:
                raise _lib.HcnnError(_lib.EFORMAT, "%s: array %d: dtype %d, ndim %d not understood "
                                     "by this package" % (self.path, i, a.dtype, a.ndim))
            shape = tuple(int(a.dims[k]) for k in range(a.ndim))
            n = 1
            for d in shape:
                n *= d
            name = a.name.decode("utf-8")
            if n == 0:
                arr = np.zeros(shape, dtype)
                arr.flags.writeable = False
            else:
                arr = view(a.data, n * dtype.itemsize, dtype, shape, h, writeable=False)
            arrays[name] = arr
        self._arrays = arrays

    def __getitem__(self, name):
        return self._arrays[name]

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self):
        return len(self._arrays)

    def __repr__(self):
        return "<hcnn.Checkpoint %r: %d arrays, model %s, epoch %s, step %s>" % (
            self.path, len(self), self.meta.get("model", "?"), self.meta.get("epoch", "?"),
            self.meta.get("step", "?"))


def load_checkpoint(path):
    """Reads and verifies the checkpoint file at `path` (magic, version, CRCs,
    names, shapes): a Checkpoint (a read-only mapping name -> ndarray)."""
    return Checkpoint(path)


def _as_array(name, value):
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor, without importing torch
        value = value.detach().cpu().numpy()
    if name.endswith(".num_batches_tracked"):
        a = np.ascontiguousarray(np.asarray(value), dtype=np.int64)
        return a, _lib.DTYPE_I64
    a = np.asarray(value)
    if a.dtype == np.float64:
        return np.ascontiguousarray(a, dtype="<f8"), _lib.DTYPE_F64
    if a.dtype.kind not in "fiub":
        raise ValueError("tensors[%r]: dtype %s is not a number" % (name, a.dtype))
    return np.ascontiguousarray(a, dtype="<f4"), _lib.DTYPE_F32


def save_checkpoint(path, tensors, config, *, overrides=None, **kwargs):
    """Writes a checkpoint at `path` of the model that `config` (a path or a
    Session, with overrides) builds, from `tensors`: a mapping name ->
    array-like (NumPy arrays, torch tensors, a Checkpoint, a state_dict).
    Everything goes through `hcnn import`'s validation: each tensor of the
    model present exactly once with its shape, finite, running variances
    >= 0; num_batches_tracked accepted and ignored; other names refused.
    float32 as it is, float64 converted by hcnn, other numbers to float32.
    Written at epoch 0, step 0, zero momentum.  Serial: under mpirun call it
    on one rank.  Returns the path."""
    p = path_arg("path", path)
    if not isinstance(tensors, collections.abc.Mapping):
        if hasattr(tensors, "items") and hasattr(tensors, "keys"):
            pass  # a mapping that does not register as one (e.g. an OrderedDict subclass)
        else:
            raise ValueError("tensors: expected a mapping name -> array, not %s"
                             % type(tensors).__name__)
    keep = []
    items = list(tensors.items())
    arr = (_lib.Array * max(1, len(items)))()
    for i, (name, value) in enumerate(items):
        if not isinstance(name, str):
            raise ValueError("tensors: a name of type %s (expected str): %r"
                             % (type(name).__name__, name))
        a, code = _as_array(name, value)
        if a.ndim > 4:
            raise ValueError("tensors[%r]: %d dimensions (at most 4)" % (name, a.ndim))
        bname = name.encode("utf-8")
        keep.append((a, bname))
        arr[i].name = bname
        arr[i].dtype = code
        arr[i].ndim = a.ndim
        for k in range(a.ndim):
            arr[i].dims[k] = a.shape[k]
        arr[i].data = a.ctypes.data if a.size else None
    with opened(config, overrides, kwargs) as s:
        _lib.check(lib.hcnn_checkpoint_write(s.ptr, p, arr, len(items)))
    del keep
    return os.fsdecode(p)
