"""Training, evaluation and benchmarking through a Session."""

import contextlib
import signal
import sys
import threading
from ctypes import byref, c_double

from . import _lib
from ._lib import lib
from ._session import int_arg, opened, path_arg

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # optional: plain lines instead
    _tqdm = None

EPOCH_FIELDS = ("epoch", "step", "lr", "train_loss", "train_acc", "test_loss", "test_acc",
                "images_per_s", "epoch_time_s", "data_wait_s", "eval_time_s")
STEP_FIELDS = ("epoch", "epochs", "batch", "batches", "step", "lr", "train_loss", "train_acc",
               "images_per_s")


def _epoch_line(d):
    return ("epoch={epoch} step={step} train_loss={train_loss:.4f} train_acc={train_acc:.4f} "
            "test_loss={test_loss:.4f} test_acc={test_acc:.4f} images_per_s={images_per_s:.1f} "
            "epoch_time_s={epoch_time_s:.3f} data_wait_s={data_wait_s:.3f} "
            "eval_time_s={eval_time_s:.3f}").format(**d)


class _Display:
    """What train(progress=True) shows on stderr: a tqdm bar per epoch when
    tqdm is there, else a line every ~10% of an epoch; the epoch lines."""

    def __init__(self, use_tqdm):
        self.use_tqdm = use_tqdm and _tqdm is not None
        self.bar = None
        self.bar_epoch = None
        self.next_line = 0

    def step(self, p):
        if self.use_tqdm:
            if self.bar is None or self.bar_epoch != p.epoch:
                self.close()
                self.bar = _tqdm(total=p.batches, desc="epoch %d/%d" % (p.epoch, p.epochs),
                                 unit="batch", file=sys.stderr, dynamic_ncols=True, leave=True)
                self.bar_epoch = p.epoch
            self.bar.set_postfix(loss="%.4f" % p.train_loss, acc="%.4f" % p.train_acc,
                                 refresh=False)
            self.bar.update(p.batch - self.bar.n)
            return
        if self.bar_epoch != p.epoch:
            self.bar_epoch = p.epoch
            self.next_line = 0
        if p.batch >= self.next_line or p.batch == p.batches:
            every = max(1, p.batches // 10)
            self.next_line = (p.batch // every + 1) * every
            pct = 100.0 * p.batch / p.batches if p.batches else 100.0
            print("hcnn: epoch %d/%d batch %d/%d (%3.0f%%) loss=%.4f acc=%.4f images/s=%.0f"
                  % (p.epoch, p.epochs, p.batch, p.batches, pct, p.train_loss, p.train_acc,
                     p.images_per_s), file=sys.stderr, flush=True)

    def epoch(self, d):
        self.close()
        line = _epoch_line(d)
        if self.use_tqdm:
            _tqdm.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class _Progress:
    """The hcnn_progress_fn of one train() call: collects the epoch rows,
    shows progress, calls the user's callable; any exception it meets
    (KeyboardInterrupt included) asks the run to stop and is kept for train()
    to raise once the C call has returned."""

    def __init__(self, session, progress):
        self.session = session
        self.metrics = []
        self.exc = None
        self.user = progress if callable(progress) else None
        # shown on rank 0 only: known once the run has started MPI (the first call)
        self.show = bool(progress) and self.user is None
        self.display = None
        self._bound = self._call  # one bound method: the object ctypes reports
        self.fn = _lib.PROGRESS_FN(self._bound)

    def _call(self, arg, pp):
        try:
            if self.exc is not None:
                return 1
            p = pp.contents
            if self.show:
                self.show = False
                if self.session.rank == 0:
                    self.display = _Display(use_tqdm=True)
            if p.kind == _lib.PROGRESS_EPOCH:
                d = {k: getattr(p, k) for k in EPOCH_FIELDS}
                d["epoch"], d["step"] = int(d["epoch"]), int(d["step"])
                self.metrics.append(d)
                if self.display:
                    self.display.epoch(d)
                if self.user and self.user(dict(d, kind="epoch")):
                    return 1
            else:
                if self.display:
                    self.display.step(p)
                if self.user:
                    d = {k: getattr(p, k) for k in STEP_FIELDS}
                    if self.user(dict(d, kind="step")):
                        return 1
            return 0
        except BaseException as e:  # KeyboardInterrupt included: stop, re-raise after
            self.exc = e
            return 1

    def unraisable(self, u):
        """A KeyboardInterrupt raised as the callback starts (the signal was
        pending while C ran: Python raises it on the callback's first
        instruction, before any try) reaches sys.unraisablehook, not
        _call: keep it and ask the run to stop all the same."""
        if u.object is self._bound:
            if self.exc is None:
                self.exc = u.exc_value
            lib.hcnn_session_request_stop(self.session.ptr)
            return True
        return False

    def close(self):
        if self.display:
            self.display.close()


@contextlib.contextmanager
def _stop_signals(ptr):
    """SIGTERM and SIGUSR1 (Slurm's preemption and --signal) stop the run
    after its step with a checkpoint, as they stop `hcnn train`, where
    they would otherwise end the interpreter and lose the run: handlers
    for the call, in the main thread, for the signals whose handler is the
    default (a script's own is left alone).  Python runs them at the next
    progress callback, between steps.  Yields the list of signals met."""
    met = []
    if threading.current_thread() is not threading.main_thread():
        yield met
        return

    def on_stop(signum, frame):
        met.append(signal.Signals(signum).name)
        lib.hcnn_session_request_stop(ptr)

    old = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            if signal.getsignal(sig) == signal.SIG_DFL:
                old[sig] = signal.signal(sig, on_stop)
        yield met
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def train(config, *, resume=None, progress=True, overrides=None, **kwargs):
    """Trains as `hcnn train --config CONFIG --set KEY=VALUE ...` does (the
    same checkpoints, CSV rows and bits), printing nothing on stdout; returns
    the per-epoch metrics, a list of dicts with the keys epoch, step, lr,
    train_loss, train_acc, test_loss, test_acc, images_per_s, epoch_time_s,
    data_wait_s, eval_time_s.

    config: a path or a Session.  Overrides as keyword arguments
    (epochs=2, lr=0.05) or overrides={"model.blocks.0.out": 8}.  resume: as
    --resume (a checkpoint path, "latest" or "auto").  progress: True (a
    tqdm bar, or lines on stderr without tqdm; rank 0 only), False (silent),
    or a callable taking a dict (kind "step" or "epoch") whose true return
    value stops the run.

    Ctrl-C (KeyboardInterrupt), or any exception in the progress callable,
    stops the run after the current step with a checkpoint, then is raised
    here.  Collective under MPI (every rank calls it)."""
    res = None
    if resume is not None:
        res = path_arg("resume", resume)
    if not (isinstance(progress, bool) or callable(progress)):
        raise ValueError("progress: expected True, False or a callable, not %r" % (progress,))
    with opened(config, overrides, kwargs) as s:
        prog = _Progress(s, progress)
        opts = _lib.TrainOptions(resume=res, quiet=1, profile=0, progress=prog.fn,
                                 progress_arg=None)
        old_hook = sys.unraisablehook

        def hook(u):
            if not prog.unraisable(u):
                old_hook(u)

        sys.unraisablehook = hook
        try:
            with s.calling("train") as ptr, _stop_signals(ptr) as stopped_by:
                rc = lib.hcnn_session_train(ptr, byref(opts))
            msg = _lib.last_error() if rc != _lib.OK else ""
            if rc == _lib.STOPPED and stopped_by:
                msg = "the run stopped on %s, after writing a checkpoint" % stopped_by[0]
        finally:
            sys.unraisablehook = old_hook
            prog.close()
        if prog.exc is not None:
            exc, prog.exc = prog.exc, None
            raise exc
        if rc != _lib.OK:
            e = _lib.error(rc, msg or ("the run stopped on a stop request, after writing a "
                                       "checkpoint" if rc == _lib.STOPPED else ""))
            e.metrics = prog.metrics
            raise e
        return prog.metrics


def evaluate(config, checkpoint, *, overrides=None, **kwargs):
    """As `hcnn eval --checkpoint CHECKPOINT`: {"test_loss": ..., "test_acc": ...}
    on the configured test set (accuracy in [0, 1]).  Collective under MPI."""
    ck = path_arg("checkpoint", checkpoint)
    with opened(config, overrides, kwargs) as s:
        loss, acc = c_double(), c_double()
        with s.calling("evaluate") as ptr:
            _lib.check(lib.hcnn_session_evaluate(ptr, ck, 1, byref(loss), byref(acc)))
        return {"test_loss": loss.value, "test_acc": acc.value}


def bench(config, warmup=2, repeats=3, steps=5, *, profile=False, overrides=None, **kwargs):
    """As `hcnn bench`: `warmup` untimed steps, then `repeats` timed repeats
    of `steps` steps on synthetic data; returns the median global rate in
    images/s.  profile=True prints what `hcnn bench` prints (the repeats and
    the per-block table, stdout); else nothing.  Collective under MPI."""
    warmup = int_arg("warmup", warmup, 0, None, "expected >= 0")
    repeats = int_arg("repeats", repeats, 1, None, "expected >= 1")
    steps = int_arg("steps", steps, 1, None, "expected >= 1")
    with opened(config, overrides, kwargs) as s:
        rate = c_double()
        with s.calling("bench") as ptr:
            _lib.check(lib.hcnn_session_bench(ptr, warmup, repeats, steps, 0 if profile else 1,
                                              byref(rate)))
        return rate.value
