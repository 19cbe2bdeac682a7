#!/usr/bin/env python3
"""ResNet-18 (configs/cifar_resnet18.yaml) one training step in float64, and
how far hcnn's step is from it: the helper of bench/winograd_precision.sh.

  winograd_precision.py data DIR --n N --seed S
      a CIFAR-10 binary data set in DIR: data_batch_1.bin with N random
      images, data_batch_2..5.bin with one each (the reader wants all five,
      none empty), test_batch.bin with one; train_limit=N keeps the first N.
  winograd_precision.py init DIR --seed S
      random float32 initial parameters, DIR/<tensor>.npy for `hcnn import`
      (which refuses a missing tensor, a wrong shape and an extra file: the
      names and shapes are those of `hcnn export`'s manifest.txt).
  winograd_precision.py compare --data DIR --init DIR --n N --lr LR
      --momentum MU --weight-decay WD --nesterov 0|1 RUN...
      RUN is ALGO=EXPORT_DIR,CSV,LOG: hcnn's parameters after the step, its
      CSV (train_loss) and its log (the convolution plans).  Prints one
      line per run against the float64 reference, then per_thread against
      batched (the float32 im2col plans' own spread), then a '#' line: the
      reference against the im2col plans; exit 1 when its loss or update
      disagrees with theirs (a wrong model or step).

Plain numpy, float64 throughout.  Tensors are NCHW like hcnn's.
"""
import argparse
import os
import re
import sys

import numpy as np

F32 = np.float32

# ---- the model -------------------------------------------------------------

# configs/cifar_resnet18.yaml: (block name, input channels, output channels,
# stride); a block with stride 2 or a channel change has a projection
# shortcut (src/layers/residual.c: residual_setup, shortcut auto)
BLOCKS = [("layer1.0", 64, 64, 1), ("layer1.1", 64, 64, 1),
          ("layer2.0", 64, 128, 2), ("layer2.1", 128, 128, 1),
          ("layer3.0", 128, 256, 2), ("layer3.1", 256, 256, 1),
          ("layer4.0", 256, 512, 2), ("layer4.1", 512, 512, 1)]
CLASSES = 10
BN_EPS = float(F32(1e-5))  # float eps (src/layers/residual.c child_spec) added in double


def has_projection(cin, cout, stride):
    return cin != cout or stride != 1


def param_shapes():
    """[(name, shape, is_state)] in hcnn's order (hcnn export's manifest)."""
    out = []

    def conv(name, o, i, k):
        out.append((name + ".weight", (o, i, k, k), False))

    def bn(name, c):
        out.extend([(name + ".weight", (c,), False), (name + ".bias", (c,), False),
                    (name + ".running_mean", (c,), True), (name + ".running_var", (c,), True)])

    conv("conv1", 64, 3, 3)
    bn("bn1", 64)
    for name, cin, cout, stride in BLOCKS:
        conv(name + ".conv1", cout, cin, 3)
        bn(name + ".bn1", cout)
        conv(name + ".conv2", cout, cout, 3)
        bn(name + ".bn2", cout)
        if has_projection(cin, cout, stride):
            conv(name + ".downsample.0", cout, cin, 1)
            bn(name + ".downsample.1", cout)
    out.append(("fc.weight", (CLASSES, 512), False))
    out.append(("fc.bias", (CLASSES,), False))
    return out


# ---- layers: forward and backward, float64 -----------------------------------

def im2col(x, k, s, p):
    """cols[c, ky, kx, n, i, j] = xpad[n, c, i*s + ky, j*s + kx]"""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    cols = np.empty((c, k, k, n, oh, ow))
    for ky in range(k):
        for kx in range(k):
            win = xp[:, :, ky:ky + s * (oh - 1) + 1:s, kx:kx + s * (ow - 1) + 1:s]
            cols[:, ky, kx] = win.transpose(1, 0, 2, 3)
    return cols


# conv (no bias): y[n,o,i,j] = sum_{c,ky,kx} W[o,c,ky,kx] xpad[n,c,i*s+ky,j*s+kx]
def conv_fwd(x, w, s, p):
    o, c, k, _ = w.shape
    cols = im2col(x, k, s, p)
    _, _, _, n, oh, ow = cols.shape
    y = w.reshape(o, -1) @ cols.reshape(c * k * k, -1)
    return y.reshape(o, n, oh, ow).transpose(1, 0, 2, 3), cols


# dW[o,c,ky,kx] = sum_{n,i,j} dy[n,o,i,j] xpad[n,c,i*s+ky,j*s+kx];
# dxpad[n,c,i*s+ky,j*s+kx] += sum_o W[o,c,ky,kx] dy[n,o,i,j] (then unpadded)
def conv_bwd(dy, cols, w, xshape, s, p):
    o, c, k, _ = w.shape
    n, _, oh, ow = dy.shape
    d2 = dy.transpose(1, 0, 2, 3).reshape(o, -1)
    dw = (d2 @ cols.reshape(c * k * k, -1).T).reshape(w.shape)
    dcols = (w.reshape(o, -1).T @ d2).reshape(c, k, k, n, oh, ow)
    h, wd = xshape[2], xshape[3]
    dxp = np.zeros((n, c, h + 2 * p, wd + 2 * p))
    for ky in range(k):
        for kx in range(k):
            dxp[:, :, ky:ky + s * (oh - 1) + 1:s, kx:kx + s * (ow - 1) + 1:s] += \
                dcols[:, ky, kx].transpose(1, 0, 2, 3)
    return dxp[:, :, p:p + h, p:p + wd], dw


# batch norm, training mode (src/cpu/bn.c): mean and biased variance over
# (n, h, w); xhat = (x - mean) / sqrt(var + eps); y = gamma xhat + beta
def bn_fwd(x, gamma, beta):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    istd = 1.0 / np.sqrt(var + BN_EPS)
    xhat = (x - mean) * istd
    return gamma[None, :, None, None] * xhat + beta[None, :, None, None], (xhat, istd)


# dbeta = sum dy, dgamma = sum dy xhat,
# dx = gamma istd (dy - mean(dy) - xhat mean(dy xhat))
def bn_bwd(dy, cache, gamma):
    xhat, istd = cache
    dbeta = dy.sum(axis=(0, 2, 3))
    dgamma = (dy * xhat).sum(axis=(0, 2, 3))
    mdy = dy.mean(axis=(0, 2, 3), keepdims=True)
    mdyx = (dy * xhat).mean(axis=(0, 2, 3), keepdims=True)
    dx = gamma[None, :, None, None] * istd * (dy - mdy - xhat * mdyx)
    return dx, dgamma, dbeta


# relu: y = max(x, 0); dx = dy [y > 0]
def relu_fwd(x):
    return np.maximum(x, 0.0)


def relu_bwd(dy, y):
    return dy * (y > 0)


# conv - bn (the unit of the stem, the body and the projection)
def conv_bn_fwd(P, x, name_conv, name_bn, s, p):
    z, cols = conv_fwd(x, P[name_conv + ".weight"], s, p)
    y, bc = bn_fwd(z, P[name_bn + ".weight"], P[name_bn + ".bias"])
    return y, (x.shape, cols, bc, name_conv, name_bn, s, p)


def conv_bn_bwd(P, G, dy, cache):
    xshape, cols, bc, name_conv, name_bn, s, p = cache
    dz, G[name_bn + ".weight"], G[name_bn + ".bias"] = bn_bwd(dy, bc, P[name_bn + ".weight"])
    dx, G[name_conv + ".weight"] = conv_bwd(dz, cols, P[name_conv + ".weight"], xshape, s, p)
    return dx


# basic block (src/layers/residual.c): h = relu(bn1(conv1_s(x)));
# y = relu(bn2(conv2(h)) + sc(x)), sc = x or bn(conv1x1_s(x))
def block_fwd(P, x, name, cin, cout, s):
    a, c1 = conv_bn_fwd(P, x, name + ".conv1", name + ".bn1", s, 1)
    h = relu_fwd(a)
    b, c2 = conv_bn_fwd(P, h, name + ".conv2", name + ".bn2", 1, 1)
    if has_projection(cin, cout, s):
        sc, c3 = conv_bn_fwd(P, x, name + ".downsample.0", name + ".downsample.1", s, 0)
    else:
        sc, c3 = x, None
    y = relu_fwd(b + sc)
    return y, (c1, h, c2, c3, y)


# g = dy [y > 0]; dx = body'(x)^T g + sc'(x)^T g
def block_bwd(P, G, dy, cache):
    c1, h, c2, c3, y = cache
    g = relu_bwd(dy, y)
    dh = conv_bn_bwd(P, G, g, c2)
    dx = conv_bn_bwd(P, G, relu_bwd(dh, h), c1)
    return dx + (conv_bn_bwd(P, G, g, c3) if c3 is not None else g)


# global average pool + fc: f[n,c] = mean_{i,j} x[n,c,i,j]; z = f W^T + b
def head_fwd(P, x):
    f = x.mean(axis=(2, 3))
    return f @ P["fc.weight"].T + P["fc.bias"], f


# dW = dz^T f, db = sum_n dz, dx[n,c,i,j] = (dz W)[n,c] / (h w)
def head_bwd(P, G, dz, f, xshape):
    G["fc.weight"] = dz.T @ f
    G["fc.bias"] = dz.sum(axis=0)
    df = dz @ P["fc.weight"]
    return np.broadcast_to(df[:, :, None, None] / (xshape[2] * xshape[3]), xshape)


# mean softmax cross-entropy (src/core/hd.h hcnn_hd_xent, gradient scale
# 1/N from src/parallel/data.c): L = mean_n (logsumexp(z_n) - z_n[y_n]),
# dz = (softmax(z) - onehot(y)) / N
def xent(z, labels):
    m = z.max(axis=1, keepdims=True)
    lse = m + np.log(np.exp(z - m).sum(axis=1, keepdims=True))
    n = z.shape[0]
    loss = float((lse[:, 0] - z[np.arange(n), labels]).mean())
    dz = np.exp(z - lse)
    dz[np.arange(n), labels] -= 1.0
    return loss, dz / n


def loss_and_grads(P, x, labels):
    """The mean loss and every parameter's gradient, float64."""
    G = {}
    a, c0 = conv_bn_fwd(P, x, "conv1", "bn1", 1, 1)
    h = relu_fwd(a)
    caches = []
    for name, cin, cout, s in BLOCKS:
        h, c = block_fwd(P, h, name, cin, cout, s)
        caches.append(c)
    z, f = head_fwd(P, h)
    loss, dz = xent(z, labels)
    dh = head_bwd(P, G, dz, f, h.shape)
    for c in reversed(caches):
        dh = block_bwd(P, G, dh, c)
    conv_bn_bwd(P, G, relu_bwd(dh, relu_fwd(a)), c0)
    return loss, G


# SGD of src/core/hd.h HCNN_HD_SGD on every parameter (the serial run's one
# range, src/train/train.c), momentum buffer zero (a fresh import):
# g' = g + wd w; v = mu 0 + g'; w -= lr (nesterov ? g' + mu v : v)
def sgd_update(w, g, lr, mu, wd, nesterov):
    gi = g + wd * w
    v = gi
    return -lr * (gi + mu * v if nesterov else v)


# ---- data ---------------------------------------------------------------------

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def write_records(path, rng, n):
    labels = rng.integers(0, CLASSES, n, dtype=np.uint8)
    pixels = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    np.concatenate([labels[:, None], pixels], axis=1).tofile(path)


def cmd_data(a):
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    write_records(os.path.join(a.dir, "data_batch_1.bin"), rng, a.n)
    for i in range(2, 6):
        write_records(os.path.join(a.dir, "data_batch_%d.bin" % i), rng, 1)
    write_records(os.path.join(a.dir, "test_batch.bin"), rng, 1)


def load_train(d, n):
    """The first n records of data_batch_1.bin as hcnn's loader makes them
    (src/data/dataset.c hcnn_batch_assemble: ((float)v / 255 - mean) / std,
    in float32), and their labels."""
    rec = np.fromfile(os.path.join(d, "data_batch_1.bin"), dtype=np.uint8).reshape(-1, 3073)[:n]
    px = rec[:, 1:].reshape(n, 3, 32, 32).astype(F32) / F32(255)
    m = np.array(CIFAR_MEAN, dtype=F32)[None, :, None, None]
    s = np.array(CIFAR_STD, dtype=F32)[None, :, None, None]
    return ((px - m) / s).astype(np.float64), rec[:, 0].astype(np.int64)


# ---- initial parameters ----------------------------------------------------------

def cmd_init(a):
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    for name, shape, state in param_shapes():
        if name.endswith("running_mean"):
            v = np.zeros(shape)
        elif name.endswith("running_var"):
            v = np.ones(shape)
        elif len(shape) > 1:  # conv and fc weights: He normal, std sqrt(2 / fan_in)
            v = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        elif name == "fc.bias":
            v = 0.1 * rng.standard_normal(shape)
        elif name.endswith(".weight"):  # batch-norm gamma near 1, beta near 0
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            v = 0.1 * rng.standard_normal(shape)
        np.save(os.path.join(a.dir, name + ".npy"), v.astype(F32))


# ---- comparison ------------------------------------------------------------------

def load_params(d):
    return {n: np.load(os.path.join(d, n + ".npy")).astype(np.float64)
            for n, _, state in param_shapes() if not state}


def errors(delta, ref):
    """Per tensor: e = max|delta - ref| / max|ref| (the metric) and
    e2 = ||delta - ref|| / ||ref|| (Euclidean: a ReLU mask flipped by
    rounding moves one row of its layer's weight gradient by a few %, which
    e shows in full and e2 diluted)."""
    e = {n: float(np.abs(delta[n] - ref[n]).max() / np.abs(ref[n]).max()) for n in ref}
    e2 = {n: float(np.linalg.norm(delta[n] - ref[n]) / np.linalg.norm(ref[n])) for n in ref}
    return e, e2


def summary(e, e2):
    conv = [n for n in e if len(PSHAPE[n]) == 4]
    wc, wa = max(conv, key=e.get), max(e, key=e.get)
    return ("conv_worst=%.4g conv_median=%.4g worst_tensor=%s conv_l2_worst=%.4g "
            "conv_l2_median=%.4g all_worst=%.4g all_median=%.4g all_worst_tensor=%s"
            % (e[wc], np.median([e[n] for n in conv]), wc, max(e2[n] for n in conv),
               np.median([e2[n] for n in conv]), e[wa], np.median(list(e.values())), wa))


PSHAPE = {n: s for n, s, _ in param_shapes()}


def csv_loss(path):
    with open(path) as f:
        rows = [r.rstrip("\n").split(",") for r in f if r.strip()]
    return rows[-1][rows[0].index("train_loss")]


def plans(log):
    """'per_thread 4, winograd_f4 10' of the run header -> per_thread:4,winograd_f4:10"""
    with open(log) as f:
        m = re.search(r"convolution plans \(layers of the model\): ([^\n]*)", f.read())
    return m.group(1).replace(", ", ",").replace(" ", ":") if m else "?"


def cmd_compare(a):
    x, labels = load_train(a.data, a.n)
    P0 = load_params(a.init)
    loss, G = loss_and_grads(P0, x, labels)
    ref = {n: sgd_update(P0[n], G[n], a.lr, a.momentum, a.weight_decay, a.nesterov) for n in P0}
    runs = {}
    for spec in a.runs:
        algo, files = spec.split("=", 1)
        d, csv, log = files.split(",")
        P1 = load_params(d)
        runs[algo] = ({n: P1[n] - P0[n] for n in P0}, csv_loss(csv), plans(log))
    for algo, (delta, hloss, plan) in runs.items():
        print("batch=%d algo=%s ref=float64 %s loss_ref=%.7f loss_hcnn=%s plans=%s"
              % (a.n, algo, summary(*errors(delta, ref)), loss, hloss, plan))
    if "batched" in runs and "per_thread" in runs:
        (db, lb, _), (dp, lp, plan) = runs["batched"], runs["per_thread"]
        print("batch=%d algo=per_thread ref=batched %s loss_ref=%s loss_hcnn=%s plans=%s"
              % (a.n, summary(*errors(dp, db)), lb, lp, plan))
    check_reference(a.n, loss, ref, runs)


def check_reference(n, loss, ref, runs):
    """The reference must be hcnn's model and step: its loss batched's (to
    the CSV's 6 decimals), its update within rounding of a float32 im2col
    plan's (the median over tensors of e2: ~1e-6, ~1e-3 where a ReLU mask
    flipped late in the network; a wrong formula gives 0.1 and more)."""
    im2col = [k for k in ("batched", "per_thread") if k in runs]
    if not im2col:
        return
    rel = abs(float(runs[im2col[0]][1]) - loss) / loss
    med = {k: float(np.median(list(errors(runs[k][0], ref)[1].values()))) for k in im2col}
    print("# batch=%d reference check: |loss_ref - loss_%s| / loss_ref = %.2g (the CSV has 6 "
          "decimals); median over tensors of ||update error|| / ||update||: %s"
          % (n, im2col[0], rel, ", ".join("%s %.2g" % kv for kv in med.items())))
    if rel > 1e-5 or min(med.values()) > 0.01:
        sys.exit("winograd_precision.py: the float64 reference disagrees with hcnn's %s step "
                 "(loss %.7f vs %s, median update error %.3g): one of them is wrong"
                 % (im2col[0], loss, runs[im2col[0]][1], min(med.values())))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("dir")
    d.add_argument("--n", type=int, required=True)
    d.add_argument("--seed", type=int, required=True)
    i = sub.add_parser("init")
    i.add_argument("dir")
    i.add_argument("--seed", type=int, required=True)
    c = sub.add_parser("compare")
    c.add_argument("--data", required=True)
    c.add_argument("--init", required=True)
    c.add_argument("--n", type=int, required=True)
    c.add_argument("--lr", type=float, required=True)
    c.add_argument("--momentum", type=float, required=True)
    c.add_argument("--weight-decay", type=float, required=True)
    c.add_argument("--nesterov", type=int, choices=(0, 1), required=True)
    c.add_argument("runs", nargs="+", metavar="ALGO=EXPORT_DIR,CSV,LOG")
    a = p.parse_args()
    if a.cmd == "compare":  # hcnn's float hyper-parameters (src/optim/sgd.c, train.c)
        a.lr, a.momentum, a.weight_decay = (float(F32(v)) for v in
                                            (a.lr, a.momentum, a.weight_decay))
    {"data": cmd_data, "init": cmd_init, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()
