"""RPN 2 grid-interdependence spec vs a hand-written CNN vs an MLP on scikit-learn digits (8x8, 10 classes).

The small-scale analogue of the paper's Table 2 MNIST column (there: 28x28 MNIST, 60k/10k images).

    python examples/cnn_digits.py [--seeds 3] [--epochs 30] [--out results.json]

Models (same training loop, same split per seed; the split is a seeded stratified 80/20 split, seed = run seed):
  rpn2      examples/specs/cnn_digits.rpn: grid_patch heads (conv), patch_max compressions (pooling),
            perceptron heads, compiled with rpn2c.compile
  cnn       the same layers written with nn.Conv2d / nn.MaxPool2d / nn.Linear (torch's default init)
  cnn_spec_init  that CNN started from the compiled spec's initial weights: isolates the initialisation
            (the spec's heads start their biases at zero, torch's layers draw them uniformly)
  mlp       64 -> 128 -> 64 -> 10 on the flattened pixels
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

import _common as C


class CNN(nn.Module):
    """conv3x3(1->16)-relu-maxpool2 -> conv3x3(16->32)-relu-maxpool2 -> fc(128->64)-relu -> fc(64->10)."""

    def __init__(self, classes: int = 10, width1: int = 16, width2: int = 32, hidden: int = 64):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width1, width2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(width2 * 4, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def cnn_from_spec_init(spec_factory, classes: int) -> CNN:
    """The hand-written CNN started from the compiled spec's initial weights (built first, under the same seed).

    nn.Conv2d / nn.Linear draw their biases from U(±1/sqrt(fan_in)) where the compiled heads start them at zero,
    so the two models start differently; this one removes that difference and nothing else.
    """
    spec = spec_factory()
    cnn = CNN(classes)
    s = spec.state_dict()
    with torch.no_grad():
        for (conv_or_lin, name) in ((cnn.features[0], "c1"), (cnn.features[3], "c2"), (cnn.head[1], "h"),
                                    (cnn.head[3], "y")):
            conv_or_lin.weight.copy_(s[f"{name}.psi.weight"].view_as(conv_or_lin.weight))
            conv_or_lin.bias.copy_(s[f"{name}.bias"])
    return cnn


EPOCHS = 30


def make_experiment(seed: int) -> C.Experiment:
    ds = C.rpn2c.data.load("digits", seed=seed)
    (xtr, ytr), (xte, yte) = ds.train, ds.test
    k = ds.num_classes
    models = {
        "rpn2": (C.spec_model("cnn_digits.rpn", classes=k), "RPN 2 spec",
                 "examples/specs/cnn_digits.rpn (grid_patch ξ + patch_max compression + perceptron heads)"),
        "cnn": (lambda: CNN(k), "backbone", "nn.Conv2d/MaxPool2d/Linear, same layer sizes"),
        "cnn_spec_init": (lambda: cnn_from_spec_init(C.spec_model("cnn_digits.rpn", classes=k), k), "backbone",
                          "the same CNN started from the spec's initial weights (zero biases)"),
        "mlp": (lambda: C.MLP([64, 128, 64, k]), "MLP", "64-128-64-10 on flattened pixels"),
    }
    return C.Experiment("digits", "classification", C.Split({"x": xtr}, ytr), C.Split({"x": xte}, yte), models,
                        epochs=EPOCHS, lr=1e-3, batch_size=64,
                        notes="digits: 1,797 8x8 images (pixels / 16), seeded stratified 80/20 split per seed.")


def main(argv: list[str] | None = None) -> dict:
    args = C.parser(__doc__.splitlines()[0], f"training epochs (default {EPOCHS})").parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    exps = [C.run_experiment(make_experiment, range(args.seeds), args.epochs)]
    return C.report("cnn_digits", argv, args, exps, started)


if __name__ == "__main__":
    main(sys.argv[1:])
