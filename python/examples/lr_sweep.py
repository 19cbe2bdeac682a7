#!/usr/bin/python3
"""A learning-rate sweep driven from Python: one hcnn.train per rate, the
per-epoch figures collected into one table (and a CSV).

    PYTHONPATH=<build>/python python3 python/examples/lr_sweep.py \\
        [--config configs/mnist_lenet.yaml] [--lrs 0.01,0.03,0.1] [--epochs 2] [--out sweep.csv]

Each run is what `hcnn train --config CONFIG --set lr=LR --set epochs=N`
would do (its checkpoints in runs/sweep/lr<LR>/), silent (progress=False);
Ctrl-C stops the run in progress after its step, with a checkpoint, and ends
the sweep.
"""

import argparse
import csv
import sys

import hcnn


def main(argv):
    p = argparse.ArgumentParser(description="learning-rate sweep over hcnn.train")
    p.add_argument("--config", default="configs/mnist_lenet.yaml")
    p.add_argument("--lrs", default="0.01,0.03,0.1")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default="sweep.csv")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="more overrides, as hcnn train --set")
    a = p.parse_args(argv)
    rows = []
    for lr in (float(x) for x in a.lrs.split(",")):
        try:
            epochs = hcnn.train(a.config, progress=False, overrides=a.set, lr=lr,
                                epochs=a.epochs, checkpoint_dir="runs/sweep/lr%g" % lr, csv="")
        except hcnn.HcnnError as e:  # e.g. a rate so high the loss is not finite
            print("lr=%g: %s (%s)" % (lr, e, e.name), file=sys.stderr)
            continue
        for r in epochs:
            rows.append(dict(r, lr_peak=lr))
        last = epochs[-1]
        print("lr=%-8g epochs=%d train_loss=%.4f test_loss=%.4f test_acc=%.4f images_per_s=%.0f"
              % (lr, last["epoch"], last["train_loss"], last["test_loss"], last["test_acc"],
                 last["images_per_s"]), flush=True)
    if rows:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        best = max((r for r in rows if r["epoch"] == a.epochs), key=lambda r: r["test_acc"],
                   default=None)
        if best:
            print("best: lr=%g test_acc=%.4f (%s)" % (best["lr_peak"], best["test_acc"], a.out))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
