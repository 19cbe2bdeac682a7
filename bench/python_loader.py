#!/usr/bin/python3
"""hcnn.Loader against PyTorch's DataLoader and against hcnn's C loader alone.

Samples per second of MNIST's training set (the real IDX files) in batches
of --batch (default 64,256), normalised float32 [n, 1, 28, 28] and labels,
in a shuffled order, by:

  bench_loader          bench/bench_loader (the C loader alone: hcnn_batch_assemble)
  hcnn_numpy            hcnn.Loader: NumPy views of the library's batches
  hcnn_torch            the same, each batch made torch tensors (torch.from_numpy: no copy)
  torch_sample_wN       DataLoader over a per-sample Dataset (uint8 -> normalised float32
                        tensor per sample) with the default collate, num_workers N (0, 2)
  torch_batch_wN        DataLoader(batch_size=None) over a TensorDataset of the normalised
                        float32 set, indexed by a BatchSampler (whole batches), num_workers N

Every variant is timed over a whole epoch (--max-batches caps it), the
variants alternate over --rounds rounds (default 3), and the medians are
printed one per line:

  loader name=hcnn_numpy batch=64 samples_per_s=1234567 rounds=3 min=... max=...

then the ratios of hcnn.Loader (NumPy) against bench_loader and against the
best DataLoader variant, and the two targets (reported, not asserted):
hcnn.Loader >= 0.5x bench_loader, >= 3x the best DataLoader.  Each Loader
is created (the data set read) before the rounds, untimed, as each
DataLoader's data set is; an epoch of it is iter() on a new epoch
(hcnn_batches_restart).  `hcnn_numpy_open_s` is the time to its first batch,
`hcnn_numpy_after_open` the rate of the batches after it.  hcnn and bench_loader assemble with --threads threads
(default: the machine's cores, as `threads: 0`); PyTorch gets
torch.set_num_threads(--threads), its workers one thread each, and
OPENBLAS_NUM_THREADS=1 (docs: /work/shared/toolchain.md's OpenBLAS notes).

    PYTHONPATH=python /usr/bin/python3 bench/python_loader.py [--batch 64,256] [--rounds 3]
        [--threads N] [--mnist-dir data/mnist] [--bench-loader bench/bench_loader]
        [--max-batches N] [--no-torch]

Exit status 0, 2 on a bad command line, 77 when the MNIST files or hcnn are missing.
"""

import argparse
import gzip
import os
import re
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy and PyTorch load OpenBLAS

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
MEAN, STD = 0.1307, 0.3081  # hcnn's MNIST normalisation (docs/running.md)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", default="64,256", help="batch sizes, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="0: the machine's cores")
    p.add_argument("--mnist-dir", default=None)
    p.add_argument("--bench-loader", default=None, help="the bench_loader program")
    p.add_argument("--max-batches", type=int, default=0, help="batches an epoch at most (0: all)")
    p.add_argument("--no-torch", action="store_true", help="hcnn only")
    a = p.parse_args(argv)
    try:
        a.batches = [int(b) for b in a.batch.split(",")]
    except ValueError:
        p.error("--batch: expected sizes like 64,256")
    if a.rounds < 1 or any(b < 1 for b in a.batches):
        p.error("--rounds and --batch: positive numbers")
    return a


def idx(path):
    """A raw or gzipped IDX file as a NumPy array."""
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                data = f.read()
            ndim = data[3]
            dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(path)


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ---- the variants: each returns (samples, seconds) of one epoch -----------------

def run_hcnn(loader, max_batches, to_torch, torch, epoch):
    """One epoch of a Loader created before (untimed), a new epoch each time
    (iter() restarts it on the data set read once)."""
    loader.epoch = epoch
    n = n_first = 0
    t0 = time.perf_counter()
    first = None
    for k, (x, y) in enumerate(loader):
        if first is None:
            first, n_first = time.perf_counter() - t0, len(y)
        if to_torch:
            x, y = torch.from_numpy(x), torch.from_numpy(y)
        n += len(y)
        if max_batches and k + 1 >= max_batches:
            break
    dt = time.perf_counter() - t0
    steady = (n - n_first) / (dt - first) if dt > first else 0.0
    return n, dt, first, steady


def run_torch(loader, max_batches):
    n = 0
    t0 = time.perf_counter()
    for k, (x, y) in enumerate(loader):
        n += len(y)
        if max_batches and k + 1 >= max_batches:
            break
    return n, time.perf_counter() - t0


def bench_loader_rate(prog, mnist, b, threads):
    out = subprocess.run([prog, "--batch", str(b), "--repeats", "3", "--threads", str(threads),
                          "--mnist-dir", mnist], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=300, check=True).stdout
    m = re.search(r"^loader dataset=mnist threads=%d samples_per_s=([0-9.]+)" % threads, out, re.M)
    if not m:
        raise RuntimeError("bench_loader printed no mnist line:\n" + out)
    return float(m.group(1))


def main(argv):
    a = parse_args(argv)
    threads = a.threads or cores()
    mnist = a.mnist_dir or os.path.join(SRC, "data", "mnist")
    try:
        images = idx(os.path.join(mnist, "train-images-idx3-ubyte"))
        labels = idx(os.path.join(mnist, "train-labels-idx1-ubyte")).astype(np.int64)
    except FileNotFoundError as e:
        print("python_loader: no MNIST training set (%s): scripts/fetch-data.sh mnist" % e,
              file=sys.stderr)
        return 77
    try:
        import hcnn
    except ImportError as e:
        print("python_loader: cannot import hcnn (%s): PYTHONPATH=<build>/python" % e,
              file=sys.stderr)
        return 77
    builddir = os.environ.get("HCNN_BUILDDIR", SRC)
    prog = a.bench_loader or os.path.join(builddir, "bench", "bench_loader")
    if not os.access(prog, os.X_OK):
        prog = None
        print("python_loader: no bench/bench_loader (make builds it): no C-loader baseline",
              file=sys.stderr)
    torch = None
    if not a.no_torch:
        try:
            import torch
            import torch.utils.data as tud
        except ImportError:
            print("python_loader: PyTorch not installed: hcnn only", file=sys.stderr)
    cfg = os.path.join(SRC, "configs", "mnist_lenet.yaml")

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    print("python_loader: MNIST train %d samples from %s; threads %d; %d rounds; cpu %s; "
          "hcnn %s (%s)%s" % (len(images), mnist, threads, a.rounds, cpu, hcnn.__version__,
                             hcnn.LIBRARY, "; torch %s" % torch.__version__ if torch else ""))

    norm = None
    if torch is not None:
        torch.set_num_threads(threads)

        class PerSample(tud.Dataset):
            def __len__(self):
                return len(images)

            def __getitem__(self, i):
                x = torch.from_numpy(images[i].astype(np.float32) / 255.0)
                return ((x - MEAN) / STD).unsqueeze(0), int(labels[i])

        norm = torch.from_numpy(((images.astype(np.float32) / 255.0 - MEAN) / STD)[:, None])
        whole = tud.TensorDataset(norm, torch.from_numpy(labels))

    results = {}
    epoch = 0
    for b in a.batches:
        loader = hcnn.Loader(cfg, data_dir=mnist, batch_size=b, threads=threads, epochs=1000)
        variants = []
        if prog:
            variants.append(("bench_loader", None))
        variants += [("hcnn_numpy", None)]
        if torch is not None:
            variants.append(("hcnn_torch", None))
            for w in (0, 2):
                kw = dict(num_workers=w, persistent_workers=w > 0)
                variants.append(("torch_sample_w%d" % w, tud.DataLoader(
                    PerSample(), batch_size=b, shuffle=True, **kw)))
                variants.append(("torch_batch_w%d" % w, tud.DataLoader(
                    whole, batch_size=None, sampler=tud.BatchSampler(
                        tud.RandomSampler(whole), batch_size=b, drop_last=False), **kw)))
        rates = {name: [] for name, _ in variants}
        rates["hcnn_numpy_after_open"] = []
        opens = []
        for r in range(a.rounds):
            for name, dl in variants:
                if name == "bench_loader":
                    rates[name].append(bench_loader_rate(prog, mnist, b, threads))
                    continue
                if name.startswith("hcnn"):
                    epoch += 1
                    n, dt, first, steady = run_hcnn(loader, a.max_batches, name == "hcnn_torch",
                                                    torch, epoch)
                    if name == "hcnn_numpy":
                        opens.append(first)
                        rates["hcnn_numpy_after_open"].append(steady)
                else:
                    if r == 0 and dl.num_workers:  # start the persistent workers untimed
                        run_torch(dl, 2)
                    n, dt = run_torch(dl, a.max_batches)
                rates[name].append(n / dt)
            print("round %d batch %d: %s" % (r + 1, b, " ".join(
                "%s=%.0f" % (k, v[-1]) for k, v in rates.items())), flush=True)
        for name, v in rates.items():
            results[(name, b)] = statistics.median(v)
            print("loader name=%s batch=%d samples_per_s=%.0f rounds=%d min=%.0f max=%.0f"
                  % (name, b, statistics.median(v), len(v), min(v), max(v)))
        print("loader name=hcnn_numpy_open_s batch=%d seconds=%.4f" % (b, statistics.median(opens)))
        hc = results[("hcnn_numpy", b)]
        if prog:
            ratio = hc / results[("bench_loader", b)]
            print("ratio name=hcnn_over_bench_loader batch=%d ratio=%.3f target>=0.5: %s"
                  % (b, ratio, "met" if ratio >= 0.5 else "NOT met"))
            ratio = results[("hcnn_numpy_after_open", b)] / results[("bench_loader", b)]
            print("ratio name=hcnn_after_open_over_bench_loader batch=%d ratio=%.3f" % (b, ratio))
        torch_rates = {k[0]: v for k, v in results.items() if k[1] == b and k[0].startswith("torch")}
        if torch_rates:
            best = max(torch_rates, key=torch_rates.get)
            ratio = hc / torch_rates[best]
            print("ratio name=hcnn_over_dataloader_best batch=%d best=%s ratio=%.2f target>=3: %s"
                  % (b, best, ratio, "met" if ratio >= 3 else "NOT met"))
        loader.close()
        for _, dl in variants:
            if dl is not None and dl.num_workers:
                dl._iterator = None  # ends the persistent workers
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
