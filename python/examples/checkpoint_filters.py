#!/usr/bin/python3
"""Notebook-style: load an hcnn checkpoint and look at its first convolution's filters.

    PYTHONPATH=<build>/python python3 python/examples/checkpoint_filters.py \\
        runs/mnist_lenet/final.hcnn [filters.png]

Prints the checkpoint's META and every array's shape, then draws the first
4-D array (the first convolution's weights, [out, in, kh, kw]) as a grid of
grey tiles: with matplotlib when it is installed, else with the small PNG
writer below (NumPy and zlib only).
"""

import struct
import sys
import zlib

import numpy as np

import hcnn


def tile_grid(w, scale=16, gap=2):
    """[out, in, kh, kw] -> one 2-D uint8 image: a row per input channel, a
    tile per output channel (as the matplotlib figure), each filter scaled
    to 0..255 on its own."""
    out, inn, kh, kw = w.shape
    img = np.full((inn * (kh * scale + gap) + gap, out * (kw * scale + gap) + gap), 255, np.uint8)
    for o in range(out):
        for i in range(inn):
            f = w[o, i]
            lo, hi = float(f.min()), float(f.max())
            g = np.zeros_like(f) if hi == lo else (f - lo) / (hi - lo)
            t = np.kron((g * 255).astype(np.uint8), np.ones((scale, scale), np.uint8))
            y, x = gap + i * (kh * scale + gap), gap + o * (kw * scale + gap)
            img[y:y + kh * scale, x:x + kw * scale] = t
    return img


def write_png(path, grey):
    """A greyscale 8-bit PNG (no dependency but zlib)."""
    h, w = grey.shape
    raw = b"".join(b"\0" + grey[r].tobytes() for r in range(h))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main(argv):
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    ck = hcnn.load_checkpoint(argv[0])
    out = argv[1] if len(argv) > 1 else "filters.png"
    print("model %s, epoch %s, step %s, seed %s" % (ck.meta.get("model"), ck.meta.get("epoch"),
                                                   ck.meta.get("step"), ck.meta.get("seed")))
    for name, a in ck.items():
        print("  %-40s %-8s %s" % (name, a.dtype, "x".join(map(str, a.shape)) or "scalar"))
    name = next((n for n, a in ck.items() if a.ndim == 4), None)
    if name is None:
        print("no convolution in this checkpoint", file=sys.stderr)
        return 1
    w = ck[name]  # a read-only view of the checkpoint's memory: no copy
    print("%s: %d filters of %dx%dx%d, mean %.4f, std %.4f"
          % (name, w.shape[0], w.shape[1], w.shape[2], w.shape[3], w.mean(), w.std()))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        write_png(out, tile_grid(w))
    else:
        fig, axes = plt.subplots(w.shape[1], w.shape[0], squeeze=False,
                                 figsize=(w.shape[0], w.shape[1] + 0.5))
        for i in range(w.shape[1]):
            for o in range(w.shape[0]):
                axes[i][o].imshow(w[o, i], cmap="gray")
                axes[i][o].axis("off")
        fig.suptitle("%s (%s)" % (name, argv[0]))
        fig.savefig(out, dpi=80)
    print("wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
