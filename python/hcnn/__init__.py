"""hcnn from Python: train, evaluate and benchmark runs, read and write
checkpoints as NumPy arrays, and iterate over hcnn's data loader.

    import hcnn
    rows = hcnn.train("configs/mnist_lenet.yaml", epochs=2, lr=0.05)
    ck = hcnn.load_checkpoint("runs/mnist_lenet/final.hcnn")
    for images, labels in hcnn.Loader("configs/mnist_lenet.yaml"):
        ...

A thin ctypes layer over libhcnn's C API (include/hcnn/hcnn.h); see
docs/python.md.  Under mpirun every rank runs the same calls (sessions are
collective); import mpi4py first if the script uses it too.
"""

from ._lib import API_VERSION, LIBRARY, HcnnError, HcnnValueError
from ._lib import lib as _clib
from ._session import Session
from ._checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from ._loader import Loader
from ._train import bench, evaluate, train

__version__ = _clib.hcnn_version().decode("utf-8", "replace")

__all__ = ["API_VERSION", "LIBRARY", "HcnnError", "HcnnValueError", "Session", "Checkpoint",
           "load_checkpoint", "save_checkpoint", "Loader", "train", "evaluate", "bench",
           "__version__"]
