"""The C library behind the package: loading, the structures and prototypes of
include/hcnn/hcnn.h, errors, and what happens at interpreter exit.

The library is libhcnn.so.1 of the build tree (its absolute path is written
into hcnn/_libpath.py by `make`), or the file named by the environment
variable HCNN_LIBRARY.  It is loaded RTLD_LOCAL: its symbols (and those of
the BLAS it links) do not become visible to other extension modules.
"""

import atexit
import ctypes
import os
import threading
import weakref
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char_p, c_double, c_int, c_int64,
                    c_long, c_size_t, c_void_p)

API_VERSION = 1

# enum hcnn_status
OK = 0
EINVAL = 1
ENOMEM = 2
EIO = 3
EFORMAT = 4
ENUMERIC = 5
EMPI = 6
STOPPED = 7
EAGREED = 8
EFATAL = 9
STATUS_NAMES = {
    OK: "HCNN_OK", EINVAL: "HCNN_EINVAL", ENOMEM: "HCNN_ENOMEM", EIO: "HCNN_EIO",
    EFORMAT: "HCNN_EFORMAT", ENUMERIC: "HCNN_ENUMERIC", EMPI: "HCNN_EMPI",
    STOPPED: "HCNN_STOPPED", EAGREED: "HCNN_EAGREED", EFATAL: "HCNN_EFATAL",
}

# enum hcnn_progress_kind, hcnn_dtype, hcnn_split
PROGRESS_STEP = 1
PROGRESS_EPOCH = 2
DTYPE_F32 = 1
DTYPE_F64 = 2
DTYPE_I64 = 3
SPLIT_TRAIN = 0
SPLIT_TEST = 1


class HcnnError(Exception):
    """A call into hcnn failed.  .code is the hcnn_status (HCNN_EIO, ...),
    .name its name, .message hcnn's own message (what `hcnn` prints after
    "hcnn: error: ")."""

    def __init__(self, code, message):
        self.code = code
        self.name = STATUS_NAMES.get(code, "status %d" % code)
        self.message = message
        super().__init__(message if message else self.name)

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class HcnnValueError(HcnnError, ValueError):
    """HCNN_EINVAL: a bad argument or configuration value (the message names it)."""


HcnnError.__module__ = HcnnValueError.__module__ = "hcnn"  # as tracebacks name them


class Progress(Structure):
    _fields_ = [
        ("kind", c_int),
        ("epoch", c_int), ("epochs", c_int),
        ("batch", c_int), ("batches", c_int),
        ("step", c_long),
        ("lr", c_double),
        ("train_loss", c_double), ("train_acc", c_double),
        ("test_loss", c_double), ("test_acc", c_double),
        ("images_per_s", c_double),
        ("epoch_time_s", c_double), ("data_wait_s", c_double), ("eval_time_s", c_double),
    ]


PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, POINTER(Progress))


class TrainOptions(Structure):
    _fields_ = [
        ("resume", c_char_p),
        ("quiet", c_int),
        ("profile", c_int),
        ("progress", PROGRESS_FN),
        ("progress_arg", c_void_p),
    ]


class Array(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_int),
        ("ndim", c_int),
        ("dims", c_int64 * 4),
        ("data", c_void_p),
    ]


class Batch(Structure):
    _fields_ = [
        ("images", c_void_p),
        ("labels", c_void_p),
        ("n", c_int), ("c", c_int), ("h", c_int), ("w", c_int),
        ("index", c_int),
        ("global_n", c_int),
        ("first", c_int),
    ]


def library_path():
    """The file the package loads: $HCNN_LIBRARY, else hcnn/_libpath.py's LIBRARY."""
    env = os.environ.get("HCNN_LIBRARY")
    if env:
        return env
    try:
        from . import _libpath
    except ImportError:
        raise ImportError(
            "hcnn: the package does not know where libhcnn.so.1 is: use the build tree's "
            "python/ directory (`make` writes python/hcnn/_libpath.py there) or set "
            "HCNN_LIBRARY to the library's path (docs/python.md)") from None
    return _libpath.LIBRARY


def _load():
    path = library_path()
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    except OSError as e:
        raise ImportError("hcnn: cannot load the library %s: %s" % (path, e)) from None

    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)
        return f

    P = c_void_p
    fn("hcnn_api_version", c_int)
    fn("hcnn_version", c_char_p)
    fn("hcnn_last_error", c_char_p)
    fn("hcnn_catch_fatal", None)
    fn("hcnn_session_open", c_int, POINTER(c_void_p), c_char_p, POINTER(c_char_p), c_int)
    fn("hcnn_session_close", None, P)
    fn("hcnn_session_rank", c_int, P)
    fn("hcnn_session_size", c_int, P)
    fn("hcnn_session_config_text", c_size_t, P, c_char_p, c_size_t)
    fn("hcnn_session_train", c_int, P, POINTER(TrainOptions))
    fn("hcnn_session_evaluate", c_int, P, c_char_p, c_int, POINTER(c_double), POINTER(c_double))
    fn("hcnn_session_bench", c_int, P, c_int, c_int, c_int, c_int, POINTER(c_double))
    fn("hcnn_session_request_stop", None, P)
    fn("hcnn_finalize", None)
    fn("hcnn_checkpoint_read", c_int, c_char_p, POINTER(c_void_p))
    fn("hcnn_checkpoint_free", None, P)
    fn("hcnn_checkpoint_count", c_int, P)
    fn("hcnn_checkpoint_array", c_int, P, c_int, POINTER(Array))
    fn("hcnn_checkpoint_meta", c_char_p, P)
    fn("hcnn_checkpoint_write", c_int, P, c_char_p, POINTER(Array), c_int)
    fn("hcnn_batches_open", c_int, P, c_int, c_int, c_int, c_int, POINTER(c_void_p))
    fn("hcnn_batches_count", c_int, P)
    fn("hcnn_batches_shape", None, P, POINTER(c_int), POINTER(c_int), POINTER(c_int))
    if hasattr(lib, "hcnn_batches_restart"):  # a library before it: each epoch opens anew
        fn("hcnn_batches_restart", c_int, P, c_int)
    fn("hcnn_batches_next", c_int, P, POINTER(c_void_p))  # the batch's address
    fn("hcnn_batch_release", None, P)
    fn("hcnn_batches_close", None, P)

    version = lib.hcnn_api_version()
    if version != API_VERSION:
        raise ImportError("hcnn: %s implements API version %d; this package needs version %d "
                          "(rebuild the package and the library together)"
                          % (path, version, API_VERSION))
    # errors come back through hcnn_last_error only, not also on stderr
    # (a library built before this switch existed prints them too)
    if hasattr(lib, "hcnn_set_error_output"):
        fn("hcnn_set_error_output", None, c_int)
        lib.hcnn_set_error_output(0)
    # a fatal error on the caller's thread of a single-process run comes back
    # as HCNN_EFATAL instead of ending the interpreter
    lib.hcnn_catch_fatal()
    # the same library through PyDLL, for the calls too short to be worth
    # releasing and taking back the GIL (a batch given back: a list push)
    pylib = ctypes.PyDLL(path, mode=os.RTLD_LOCAL)
    pylib.hcnn_batch_release.restype = None
    pylib.hcnn_batch_release.argtypes = [P]
    return lib, pylib, path


lib, pylib, LIBRARY = _load()


def last_error():
    msg = lib.hcnn_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def error(code, message=None):
    """The exception for status `code` (hcnn's message unless one is given)."""
    if message is None:
        message = last_error()
    cls = HcnnValueError if code == EINVAL else HcnnError
    return cls(code, message)


def check(code):
    if code != OK:
        raise error(code)


# ---- C objects that must go before hcnn_finalize ------------------------------
# Sessions and batch loaders still open at interpreter exit are closed
# (loaders first) before hcnn_finalize(), which finalises MPI when hcnn
# initialised it; anything collected later finds them closed.
_live = weakref.WeakSet()
_live_lock = threading.Lock()
_finalized = False


class Handle:
    """Owns one C object; close() (idempotent) frees it.  Subclasses set
    _free and may set _order (lower: closed first at exit)."""
    _order = 1
    _free = None

    def __init__(self, ptr):
        self.ptr = ptr
        self.lock = threading.RLock()
        with _live_lock:
            _live.add(self)

    def close(self):
        with self.lock:
            ptr, self.ptr = self.ptr, None
            if ptr and not _finalized_for(self):
                type(self)._free(ptr)

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter teardown the module may be half gone
            pass


def _finalized_for(handle):
    # after hcnn_finalize only the objects that do not depend on MPI may be freed
    return _finalized and handle._order < 2


def _shutdown():
    global _finalized
    with _live_lock:
        handles = sorted(list(_live), key=lambda h: h._order)
    for h in handles:
        if h._order < 2:
            h.close()
    _finalized = True
    lib.hcnn_finalize()


atexit.register(_shutdown)
