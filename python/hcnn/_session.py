"""Sessions: a configuration file plus overrides, opened on every rank."""

import contextlib
import math
import numbers
import os
import re
from ctypes import byref, c_char_p, c_void_p, create_string_buffer

from . import _lib
from ._lib import lib

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


def _yaml_value(key, value):
    """`value` as the --set text the command line would take for it."""
    if value is None:
        return "~"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError("overrides: %s=%r: not a finite number" % (key, value))
        return repr(v)
    if isinstance(value, (str, os.PathLike)):
        s = os.fspath(value)
        if isinstance(s, bytes):
            s = os.fsdecode(s)
        if "\n" in s or "\0" in s:
            raise ValueError("overrides: %s=%r: a value on one line, without NUL" % (key, value))
        # quoted: the string itself, never YAML ("null", "~" and " " were an
        # empty checkpoint_dir, "runs/a #b" was runs/a); a number or a
        # choice quoted reads as one (raw YAML: a "key=value" string)
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(key, v) for v in value) + "]"
    raise ValueError("overrides: %s=%r: a value of type %s (expected bool, int, float, str, "
                     "None or a list of them)" % (key, value, type(value).__name__))


def override_strings(overrides=None, kwargs=None):
    """The "key=value" strings of an `overrides` argument (a mapping, or a
    sequence of "key=value" strings as --set takes them) and of keyword
    arguments, in that order.  Raises ValueError naming what is wrong."""
    out = []
    if overrides is not None:
        if isinstance(overrides, (str, bytes)):
            raise ValueError("overrides: expected a mapping or a sequence of 'key=value' "
                             "strings, not a single string %r" % (overrides,))
        if hasattr(overrides, "items"):
            items = list(overrides.items())
        else:
            try:
                seq = list(overrides)
            except TypeError:
                raise ValueError("overrides: expected a mapping or a sequence of 'key=value' "
                                 "strings, not %s" % type(overrides).__name__) from None
            items = []
            for s in seq:
                if not isinstance(s, str) or "=" not in s:
                    raise ValueError("overrides: %r is not of the form key=value" % (s,))
                k, v = s.split("=", 1)
                items.append((k, _Raw(v)))
        for k, v in items:
            out.append(_one(k, v))
    for k, v in (kwargs or {}).items():
        out.append(_one(k, v))
    return out


class _Raw(str):
    """A value given as text ("lr=0.1"): passed on as it is."""


def _one(key, value):
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError("overrides: %r is not a configuration key (key=value, a dotted key "
                         "such as model.blocks.0.out)" % (key,))
    if isinstance(value, _Raw):
        if "\n" in value or "\0" in value:
            raise ValueError("overrides: %s=%r: a value on one line, without NUL" % (key, str(value)))
        return "%s=%s" % (key, value)
    return "%s=%s" % (key, _yaml_value(key, value))


def path_arg(name, value):
    """A file-name argument as bytes for C (ValueError naming `name` if it is none)."""
    if isinstance(value, (str, bytes, os.PathLike)):
        b = os.fsencode(value)
        if not b:
            raise ValueError("%s: an empty path" % name)
        if b"\0" in b:
            raise ValueError("%s: a path with a NUL byte" % name)
        return b
    raise ValueError("%s: expected a path (str or os.PathLike), not %s"
                     % (name, type(value).__name__))


def int_arg(name, value, lo=None, hi=None, what=None):
    """An integer argument (not a bool), in [lo, hi]; ValueError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("%s: expected an integer, not %r" % (name, value))
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError("%s=%d: %s" % (name, v, what or "out of range"))
    return v


class _SessionHandle(_lib.Handle):
    _order = 1
    _free = lib.hcnn_session_close
    busy = None  # the collective call in progress on it ("train", ...), else None


class Session:
    """A run configuration opened on every rank: the YAML file `config` with
    the overrides (`overrides=` a mapping or "key=value" strings, and keyword
    arguments: Session("configs/mnist_lenet.yaml", epochs=2, lr=0.05)).

    Opening reads the file in this process alone; training, evaluating and
    benchmarking on it are collective under MPI (every rank makes the same
    calls in the same order; the first starts MPI).  Use it as a context
    manager, or call close(); train(), evaluate(), bench(), Loader() and
    save_checkpoint() take a Session in place of a path."""

    def __init__(self, config, *, overrides=None, **kwargs):
        cfg = path_arg("config", config)
        sets = override_strings(overrides, kwargs)
        enc = [s.encode("utf-8") for s in sets]
        arr = (c_char_p * max(1, len(enc)))(*enc)
        out = c_void_p()
        _lib.check(lib.hcnn_session_open(byref(out), cfg, arr, len(enc)))
        self._h = _SessionHandle(out.value)
        self.config = os.fsdecode(cfg)
        self.overrides = tuple(sets)

    @property
    def ptr(self):
        p = self._h.ptr
        if not p:
            raise ValueError("session: it is closed")
        return p

    @property
    def closed(self):
        return not self._h.ptr

    @property
    def rank(self):
        """This process's rank in the job (0 without MPI)."""
        return lib.hcnn_session_rank(self.ptr)

    @property
    def size(self):
        """The job's number of ranks (1 without MPI)."""
        return lib.hcnn_session_size(self.ptr)

    @property
    def config_text(self):
        """The configuration after overrides, as YAML (as `hcnn train` prints it)."""
        n = lib.hcnn_session_config_text(self.ptr, None, 0)
        buf = create_string_buffer(n + 1)
        lib.hcnn_session_config_text(self.ptr, buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def request_stop(self):
        """Asks a training run in progress on this session (in another thread)
        to stop after its current step with a checkpoint."""
        p = self._h.ptr
        if p:
            lib.hcnn_session_request_stop(p)

    def close(self):
        """Closes the session (on every rank under MPI, after its last
        collective call); idempotent.  From another thread during a call on
        it (train, evaluate, bench), waits for that call to return; from
        within one (its progress callable), raises RuntimeError: the call
        still uses the session."""
        h = self._h
        with h.lock:
            if h.busy:
                raise RuntimeError("session: close() during its own %s() (from its progress "
                                   "callable?): close it after %s() returns" % (h.busy, h.busy))
            h.close()

    @contextlib.contextmanager
    def calling(self, what):
        """The session's pointer for the call `what`, held against close()
        (Session.close) until it returns."""
        h = self._h
        with h.lock:
            ptr, before = self.ptr, h.busy
            h.busy = what
            try:
                yield ptr
            finally:
                h.busy = before

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return "<hcnn.Session %s %r%s>" % (
            state, self.config, "".join(" --set " + s for s in self.overrides))


class opened:
    """Context manager: the Session given, or one opened from a path with the
    overrides (closed at the end)."""

    def __init__(self, config, overrides, kwargs):
        if isinstance(config, Session):
            if overrides or kwargs:
                raise ValueError("overrides: give them to the Session, not with one")
            self.session, self.own = config, False
        else:
            self.session, self.own = Session(config, overrides=overrides, **kwargs), True

    def __enter__(self):
        return self.session

    def __exit__(self, *exc):
        if self.own:
            self.session.close()
