"""RPN 2 attention spec vs an nn.TransformerEncoderLayer classifier vs an MLP on real time-series classification.

The paper has no attention-only table; its Transformer rewrite (§8.4) is the backbone here, on two UCR/UEA
sets that ship offline with sktime (the archives' own train/test files):

  italy_power    UCR ItalyPowerDemand: 24-hour demand curves, winter vs summer (67 train / 1,029 test)
  basic_motions  UEA BasicMotions: 6-axis smartwatch, 100 steps, 4 activities (40 train / 40 test)

    python examples/attention_sequence.py [--seeds 3] [--epochs 100] [--datasets italy_power,basic_motions]
                                          [--out F]

Models (d = 32, 4 heads, feed-forward 64, one post-norm encoder block, no dropout; same loop, same split):
  rpn2         examples/specs/attention_seq.rpn: embedding head + sinusoidal positions (an input) -> encoder
               block of RPN 2 heads (low-rank bilinear ξ x 4 heads, concat+linear fusion, identity π,
               layer_norm) -> mean over time -> output head
  transformer  Linear embedding + the same sinusoidal positions -> nn.TransformerEncoderLayer(norm_first=False)
               -> mean over time -> Linear (the same function class: identical parameter count)
  mlp          the flattened series -> 64 -> 64 -> classes
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

import _common as C


class TransformerClassifier(nn.Module):
    """x [B, T, F] -> Linear(F, d) + pos -> TransformerEncoderLayer -> mean over T -> Linear(d, classes)."""

    def __init__(self, features: int, d: int, heads: int, ffn: int, classes: int):
        super().__init__()
        self.embed = nn.Linear(features, d)
        self.encoder = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ffn, dropout=0.0, batch_first=True,
                                                  norm_first=False)
        self.out = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.out(self.encoder(self.embed(x) + pos).mean(1))


D, HEADS, FFN = 32, 4, 64
# per data set: (epochs, batch size, lr)
SETUPS = {"italy_power": (100, 16, 1e-3), "basic_motions": (100, 8, 1e-3)}


def experiment_factory(name: str):
    epochs, batch, lr = SETUPS[name]

    def make(seed: int) -> C.Experiment:
        ds = C.rpn2c.data.load(name, seed=seed)
        (xtr, ytr), (xte, yte) = ds.train, ds.test
        _, steps, feats = xtr.shape
        k = ds.num_classes
        pe = C.sinusoidal_positions(steps, D)
        train = C.Split({"x": xtr, "pos": pe.expand(xtr.shape[0], -1, -1)}, ytr)
        test = C.Split({"x": xte, "pos": pe.expand(xte.shape[0], -1, -1)}, yte)
        models = {
            "rpn2": (C.spec_model("attention_seq.rpn", "attention_classifier", features=feats, steps=steps, d=D,
                                  heads=HEADS, ffn=FFN, classes=k),
                     "RPN 2 spec", "examples/specs/attention_seq.rpn: bilinear-ξ encoder block, mean readout"),
            "transformer": (lambda: TransformerClassifier(feats, D, HEADS, FFN, k), "backbone",
                            "Linear + nn.TransformerEncoderLayer + mean + Linear"),
            "mlp": (lambda: C.MLP([steps * feats, 64, 64, k]), "MLP", f"{steps * feats}-64-64-{k}"),
        }
        note = (f"{name}: {C.rpn2c.data.available()[name]}; the archive's fixed train/test files (the seed "
                "changes only the initialisation and the batch order).")
        return C.Experiment(name, "classification", train, test, models, epochs=epochs, lr=lr, batch_size=batch,
                            notes=note)

    return make


def main(argv: list[str] | None = None) -> dict:
    p = C.parser(__doc__.splitlines()[0], "training epochs (default: 100 per data set)")
    p.add_argument("--datasets", default="italy_power,basic_motions",
                   help=f"comma-separated subset of {','.join(SETUPS)}")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    exps = []
    for name in C.dataset_names(p, args, SETUPS):
        exps.append(C.run_experiment(experiment_factory(name), range(args.seeds), args.epochs))
    return C.report("attention_sequence", argv, args, exps, started)


if __name__ == "__main__":
    main(sys.argv[1:])
