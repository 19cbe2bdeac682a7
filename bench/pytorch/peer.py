#!/usr/bin/python3
"""PyTorch peer for hcnn's training-throughput benchmark.

Benchmark-only: hcnn never depends on it.  It trains the same LeNet-5 or
CIFAR ResNet-18 as configs/mnist_lenet.yaml / configs/cifar_resnet18.yaml on
synthetic inputs and labels made once (a pool of --pool distinct batches,
cycled), times `repeats` repeats of `steps` train steps (forward +
cross-entropy + backward + SGD step) after `warmup` untimed steps, prints one
line per repeat and, as its LAST line,

    images_per_s=<median over repeats>

Use Debian's python3-torch with /usr/bin/python3 (not a pyenv python):

    /usr/bin/python3 bench/pytorch/peer.py --model lenet --batch 64 --threads 2

--device cuda trains on the GPU (model, batches and optimiser state in its
memory, cuDNN with cudnn.benchmark: its fastest algorithms), each repeat
timed between two torch.cuda.synchronize(); --precision: fp32 (TF32 off for
convolutions and matmuls alike: PyTorch's default lets cuDNN use TF32),
tf32 (on for both), bf16 (torch.autocast to bfloat16, FP32 master weights),
as hcnn's precision key.

On the CPU (--device cpu, the default) --precision is fp32 or bf16
(torch.autocast("cpu", dtype=torch.bfloat16): convolutions and matmuls in
bfloat16 through oneDNN, FP32 master weights and optimiser); tf32 is a GPU
format and is refused (exit 2).

--memory-format contiguous|channels_last (--channels-last: the second)
picks PyTorch's memory format, on either device: contiguous (NCHW, the
default, hcnn's) or channels_last (NHWC: oneDNN's preferred layout on CPUs,
cuDNN's on tensor cores), as PyTorch's channels-last tutorial does it: the
model once, model.to(memory_format=torch.channels_last), and each step's
batch, batch.to(memory_format=torch.channels_last) (the synthetic batches
are made in NCHW, as a data loader's).  The header says layout=nchw|nhwc
(asked) and memory_format=<what the tensors are in>, checked with
is_contiguous(memory_format=...) on the model's 4-D weights and a
converted batch; when that is not the format asked (another, or a mix)
peer.py says so and exits 1 before timing: such a run would time the
wrong thing.  The four CPU modes -- fp32 or bf16, NCHW or channels_last -- are
what bench/compare.sh --peer-modes runs; on the GPU compare.sh runs both
formats at its precision (--torch-format best).  The
header says precision=<p> and, for bf16 on the CPU, cpu_bf16=native:<flags>
when /proc/cpuinfo shows avx512_bf16 or amx_bf16, else cpu_bf16=emulated
(PyTorch still runs it, converting around FP32 arithmetic: its timings then
say nothing of a CPU with bf16 instructions; a note on stderr says so).
PEER_CPUINFO=<file> reads the flags from another file than /proc/cpuinfo
(the tests use it to check the emulated case on any CPU).

--profiler-windows (with --device cuda) brackets each timed repeat with
cudaProfilerStart / cudaProfilerStop (torch.cuda.profiler), as hcnn bench
does, so that a CUDA profiler or bench/kernel_share.so (a CUPTI injection
library: CUDA_INJECTION64_PATH) sees the timed steps alone: which kernels
PyTorch's cuDNN chose and where its step goes (bench/gpu_check.sh's
kernels_pytorch_*.log).  Without a profiler attached the two calls do
nothing.

--serve: a server of runs.  It imports torch, sets its threads and (with
--device cuda) makes its CUDA context, prints

    peer_ready

then reads runs from stdin, one a line (further options, added to this
command line's: a run's --precision, --memory-format, --model,
--batch...), and answers each with the output a process of its own would
print (the header, the repeats, images_per_s=) then one line

    peer_served=<K> status=<the exit status that process would have had>

Each run builds its model, optimiser and batches again from --seed, and
after it the memory PyTorch cached on the GPU goes back to the driver; the
import and CUDA's start (12-15 s a run with the rest of a fresh process on
the H100 of 2026-11-27, 1-2 s on a 2-core CPU) are spent once.  What does
carry over from run to run: cuDNN's algorithm choices (cudnn.benchmark
searches a shape once a process; a process of its own would search again)
and Python's once-only warnings.  bench/compare.sh --peer-process server
runs its PyTorch side this way, a server a mode (the default with
--device cuda).  --device, --threads, --blas-threads and --no-mkldnn are
the server's: a line that changes one is refused (status 2); so is a line
with --serve.  The server ends at the end of its input (exit 0).

Exit status: 0 success, 1 the tensors are not in the memory format asked,
2 bad command line, 77 python3-torch not installed (or --device cuda without
a GPU PyTorch can use).
"""

import argparse
import gc
import importlib
import os
import shlex
import statistics
import sys
import time
import traceback


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="peer.py",
        description="PyTorch training throughput on the same models as hcnn's configs "
        "(synthetic data; last line images_per_s=<median>).")
    p.add_argument("--model", choices=("lenet", "resnet18"), required=True)
    p.add_argument("--batch", type=int, required=True, help="samples per step")
    p.add_argument("--threads", type=int, required=True,
                   help="intra-op threads (torch.set_num_threads)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (default 5)")
    p.add_argument("--steps", type=int, default=5, help="steps per repeat (default 5)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--no-mkldnn", action="store_true",
                   help="disable oneDNN (torch.backends.mkldnn.enabled=False): convolutions "
                   "take PyTorch's own im2col + BLAS path")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="OPENBLAS_NUM_THREADS set before importing torch (default 1, "
                   "its best setting on the 2-core machines; see bench/README.md)")
    p.add_argument("--pool", type=int, default=8,
                   help="distinct synthetic batches, made once and cycled (default 8)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--memory-format", choices=("contiguous", "channels_last"), default=None,
                   help="PyTorch's memory format for the model and each step's batch: "
                   "contiguous (NCHW, the default, hcnn's) or channels_last (NHWC)")
    p.add_argument("--channels-last", action="store_true",
                   help="the same as --memory-format channels_last")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--profiler-windows", action="store_true",
                   help="--device cuda: cudaProfilerStart/Stop around each timed repeat "
                   "(for a CUDA profiler or bench/kernel_share.so)")
    p.add_argument("--serve", action="store_true",
                   help="read runs from stdin, one a line of further options; answer each "
                   "with its output and a line peer_served=K status=N (torch loaded once)")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32",
                   help="fp32 (on cuda: no TF32), tf32 (cuda only), bf16 (torch.autocast "
                   "to bfloat16, FP32 master weights; cpu or cuda); default fp32")
    a = p.parse_args(argv)
    for name in ("batch", "threads", "repeats", "steps", "blas_threads", "pool"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name.replace("_", "-"))
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.channels_last and a.memory_format == "contiguous":
        p.error("--channels-last contradicts --memory-format contiguous")
    if a.memory_format is None:
        a.memory_format = "channels_last" if a.channels_last else "contiguous"
    a.channels_last = a.memory_format == "channels_last"
    if a.nesterov and a.momentum <= 0:
        p.error("--nesterov needs --momentum > 0")
    if a.device == "cpu" and a.profiler_windows:
        p.error("--profiler-windows needs --device cuda (it brackets the timed repeats with "
                "cudaProfilerStart/Stop)")
    if a.device == "cpu" and a.precision == "tf32":
        p.error("--precision tf32 needs --device cuda (TF32 is a GPU tensor-core format; "
                "on the CPU use fp32 or bf16)")
    return a


def cpu_bf16_flags(path=None):
    """The CPU's bf16 instruction flags (avx512_bf16, amx_bf16) listed in
    /proc/cpuinfo (or PEER_CPUINFO), in that order; [] when none or unreadable."""
    path = path or os.environ.get("PEER_CPUINFO") or "/proc/cpuinfo"
    flags = set()
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.partition(":")[2].split())
    except OSError:
        return []
    return [x for x in ("avx512_bf16", "amx_bf16") if x in flags]


def memory_format_of(torch, tensors):
    """The memory format the 4-D tensors share: 'contiguous', 'channels_last',
    or 'mixed' when they disagree.  A tensor with one channel or a 1x1 plane
    satisfies both formats: it counts for neither (the others decide); when
    every tensor satisfies both, 'contiguous' (no layout was imposed)."""
    ts = [t for t in tensors if t.dim() == 4]
    nchw = all(t.is_contiguous() for t in ts)
    nhwc = all(t.is_contiguous(memory_format=torch.channels_last) for t in ts)
    if nchw:
        return "contiguous"
    return "channels_last" if nhwc else "mixed"


def build_model(torch, name):
    nn = torch.nn
    if name == "lenet":
        # configs/mnist_lenet.yaml: 1x28x28 -> 10
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),    # 6x14x14
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),              # 16x5x5
            nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10)), (1, 28, 28)

    # configs/cifar_resnet18.yaml: 3x32x32 -> 10, CIFAR variant (3x3 stem,
    # no max-pool), basic blocks conv3x3-bn-relu-conv3x3-bn + shortcut, relu
    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            sc = x if self.downsample is None else self.downsample(x)
            return self.relu(out + sc)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride),
                                            BasicBlock(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, 10)

        def forward(self, x):
            x = self.relu(self.bn1(self.conv1(x)))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet18(), (3, 32, 32)


# the options a --serve process fixes at its start (a run's line may not change them)
SERVER_OPTIONS = ("device", "threads", "blas_threads", "no_mkldnn")


def main(argv):
    a = parse_args(argv)
    # Before torch loads OpenBLAS: the BLAS calls PyTorch makes inside its own
    # parallel regions must stay single-threaded, or the pthread OpenBLAS
    # starts its workers on top of PyTorch's (oversubscription).
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.blas_threads)
    try:
        import torch
    except ImportError:
        print("python3-torch not installed: apt-get install python3-torch", file=sys.stderr)
        return 77

    torch.set_num_interop_threads(1)
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = not a.no_mkldnn
    if a.device == "cuda" and not torch.cuda.is_available():
        print("peer.py: --device cuda: PyTorch sees no usable GPU", file=sys.stderr)
        return 77
    if a.serve:
        return serve(torch, [w for w in argv if w != "--serve"], a)
    return run(torch, a)


def serve(torch, argv, server):
    """--serve: a run for each line of stdin (argv and the line's options),
    its output, then peer_served=K status=N; 0 at the end of the input."""
    if server.device == "cuda":
        torch.zeros(1, device="cuda")  # the context, before the first run's clock
    print("peer_ready", flush=True)
    k = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        k += 1
        try:
            a = parse_args(argv + shlex.split(line))
            changed = ["--" + o.replace("_", "-") for o in SERVER_OPTIONS
                       if getattr(a, o) != getattr(server, o)]
            if a.serve or changed:
                print("peer.py --serve: a run cannot change %s (the server's; start another)"
                      % ", ".join(changed or ["--serve"]), file=sys.stderr)
                status = 2
            else:
                status = run(torch, a)
        except SystemExit as e:  # parse_args' error (its message is out), or --help
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except Exception:  # what would have ended a process of its own
            traceback.print_exc()
            status = 1
        gc.collect()  # the run's model, batches and optimiser state
        if server.device == "cuda":
            torch.cuda.empty_cache()  # the next run allocates as a fresh process would
        sys.stderr.flush()
        print("peer_served=%d status=%d" % (k, status), flush=True)
    return 0


def run(torch, a):
    """One measurement: the model, batches and optimiser from a.seed, the
    header, the timed repeats, images_per_s=; its exit status."""
    torch.manual_seed(a.seed)
    if a.device == "cuda":
        torch.backends.cudnn.benchmark = True
        tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32

    model, shape = build_model(torch, a.model)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model.to(a.device, memory_format=fmt).train()
    # several distinct batches, as hcnn's bench (which feeds distinct synthetic
    # samples): one batch repeated is memorised within a few hundred steps.
    # Made in NCHW, as a data loader hands them over; each step converts its
    # batch (PyTorch's channels-last recipe; for NCHW .to() returns the batch
    # itself, no copy)
    xs = [torch.randn((a.batch,) + shape).to(a.device) for _ in range(a.pool)]
    ys = [torch.randint(0, 10, (a.batch,)).to(a.device) for _ in range(a.pool)]
    bf16 = a.precision == "bf16"
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                          weight_decay=a.weight_decay, nesterov=a.nesterov)

    it = [0]

    def step():
        k = it[0] % a.pool
        it[0] += 1
        opt.zero_grad(set_to_none=True)
        x = xs[k].to(memory_format=fmt)
        if bf16:
            with torch.autocast(a.device, dtype=torch.bfloat16):
                out = model(x)
            loss = loss_fn(out.float(), ys[k])
        else:
            loss = loss_fn(model(x), ys[k])
        loss.backward()
        opt.step()
        return loss

    # the format the run is really in: the model's 4-D weights and a batch as
    # step() converts it (a layout silently not applied would time NCHW twice)
    used = memory_format_of(torch, list(model.parameters()) + [xs[0].to(memory_format=fmt)])
    if used != a.memory_format:
        print("peer.py: asked for memory_format=%s, but the model's weights and batch are %s"
              % (a.memory_format, used), file=sys.stderr)
        return 1

    where = a.device
    extra = ""
    if a.device == "cpu" and bf16:
        isa = cpu_bf16_flags()
        extra = " cpu_bf16=" + ("native:" + ",".join(isa) if isa else "emulated")
        if not isa:
            print("peer.py: note: this CPU has no bf16 instructions (no avx512_bf16 or amx_bf16 "
                  "in %s): PyTorch emulates bf16 on it, converting around FP32 arithmetic"
                  % (os.environ.get("PEER_CPUINFO") or "/proc/cpuinfo"), file=sys.stderr)
    if a.device == "cuda":
        where = "cuda:%s:cudnn%s:%s" % (torch.cuda.get_device_name(0).replace(" ", "_"),
                                        torch.backends.cudnn.version(), a.precision)
    print("peer torch=%s device=%s model=%s batch=%d threads=%d mkldnn=%d layout=%s "
          "memory_format=%s openblas_threads=%s "
          "lr=%g momentum=%g weight_decay=%g nesterov=%d warmup=%d repeats=%d steps=%d pool=%d "
          "precision=%s%s"
          % (torch.__version__, where, a.model, a.batch, torch.get_num_threads(),
             int(torch.backends.mkldnn.enabled), "nhwc" if a.channels_last else "nchw",
             used, os.environ["OPENBLAS_NUM_THREADS"],
             a.lr, a.momentum, a.weight_decay, int(a.nesterov),
             a.warmup, a.repeats, a.steps, a.pool, a.precision, extra), flush=True)

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    rates = []
    loss = None
    # cudaProfilerStart/Stop (--profiler-windows; parse_args refused it on the CPU)
    prof = importlib.import_module("torch.cuda.profiler") if a.profiler_windows else None
    for r in range(a.repeats):
        sync()
        if prof:
            prof.start()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        sync()
        dt = time.perf_counter() - t0
        if prof:
            prof.stop()
        loss_v = float(loss)
        rates.append(a.batch * a.steps / dt)
        print("repeat=%d steps=%d time_s=%.4f loss=%.4f images_per_s=%.1f"
              % (r + 1, a.steps, dt, loss_v, rates[-1]), flush=True)
    if loss is not None and not torch.isfinite(loss):
        print("peer.py: warning: the loss is not finite (timings may be off)", file=sys.stderr)
    print("images_per_s=%.1f" % statistics.median(rates), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
