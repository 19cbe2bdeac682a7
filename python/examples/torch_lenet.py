#!/usr/bin/python3
"""PyTorch trains LeNet-5 on hcnn's data loader; hcnn evaluates the result.

    PYTHONPATH=<build>/python python3 python/examples/torch_lenet.py \\
        [--config configs/mnist_lenet.yaml] [--epochs 1] [--threads 2] [--max-batches N]

hcnn.Loader gives the batches `hcnn train` would train on (normalised,
shuffled per epoch from the configuration's seed) as NumPy views of the
library's memory; torch.from_numpy wraps them without a copy.  The model's
module names are hcnn's layer names (conv1, conv2, fc1, fc2, fc3), so its
state_dict is an hcnn checkpoint away: hcnn.save_checkpoint writes it through
`hcnn import`'s checks and hcnn.evaluate scores it on the test set.
"""

import argparse
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # PyTorch's OpenBLAS: no threads of its own

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hcnn  # noqa: E402


class LeNet5(nn.Module):
    """configs/mnist_lenet.yaml's model, with its layer names."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main(argv):
    p = argparse.ArgumentParser(description="LeNet-5 in PyTorch on hcnn.Loader")
    p.add_argument("--config", default="configs/mnist_lenet.yaml")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--max-batches", type=int, default=0, help="batches an epoch at most (0: all)")
    p.add_argument("--out", default="torch_lenet.hcnn", help="the trained model as a checkpoint")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    model = LeNet5()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    # threads: the loader's assembly threads; epochs: how many epochs it may be asked for
    loader = hcnn.Loader(a.config, split="train", epochs=a.epochs, threads=a.threads)
    print("%d batches an epoch, samples %s" % (len(loader), "x".join(map(str, loader.shape))))
    for epoch in range(a.epochs):
        loader.epoch = epoch  # this epoch's shuffle, as hcnn train's
        model.train()
        seen = correct = 0
        loss_sum = 0.0
        for k, (images, labels) in enumerate(loader):
            x = torch.from_numpy(images)        # shares the batch's memory
            y = torch.from_numpy(labels).long()
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            loss_sum += loss.item() * len(y)
            correct += int((out.argmax(1) == y).sum())
            if a.max_batches and k + 1 >= a.max_batches:
                break
        print("epoch=%d train_loss=%.4f train_acc=%.4f" % (epoch + 1, loss_sum / seen, correct / seen))

    # the test set through the same loader, then hcnn's own evaluation of the same weights
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in hcnn.Loader(a.config, split="test"):
            correct += int((model(torch.from_numpy(images)).argmax(1) ==
                            torch.from_numpy(labels).long()).sum())
            total += len(labels)
    hcnn.save_checkpoint(a.out, model.state_dict(), a.config)
    r = hcnn.evaluate(a.config, a.out)
    print("pytorch test_acc=%.4f; hcnn eval of %s: test_loss=%.4f test_acc=%.4f"
          % (correct / total, a.out, r["test_loss"], r["test_acc"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
