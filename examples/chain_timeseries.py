"""RPN 2 chain-interdependence spec vs nn.RNN / nn.GRU vs an MLP on real time series (offline).

The small-scale analogue of the paper's Table 4 (there: Nasdaq stock/ETF and traffic series, 10 steps -> the
next one, MSE) plus a classification set:

  sunspots     yearly sunspot numbers 1700-2008 (statsmodels): 12-year windows -> the next year, MSE on the
               standardized series, chronological 80/20 split (the same for every seed)
  italy_power  UCR ItalyPowerDemand (sktime): 24-hour demand curves, winter vs summer, the archive's own
               train/test files (67 / 1,029), accuracy

    python examples/chain_timeseries.py [--seeds 3] [--epochs N] [--datasets sunspots,italy_power] [--out F]

Models (same loop, same split):
  rpn2_mean examples/specs/chain_seq.rpn chain_mean: embedding head, a chain head, a perceptron head, a 3-hop
            chain head, mean over time (the paper's readout), output head
  rpn2_flat the same block with a flatten readout (chain_flat)
  rpn2_rec  examples/specs/recurrent_seq.rpn: rpn2c's exact `recurrent` layer (not in the paper; nn.RNN's maths),
            2 layers, mean readout (the language has no "last item" operation)
  rnn       Linear embedding -> 2-layer nn.RNN (tanh) -> last hidden state -> Linear (the paper's baseline)
  gru       the same with nn.GRU
  mlp       the flattened window -> 64 -> 64 -> output (the paper's MLP baseline maps the window directly)
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

import _common as C


class Recurrent(nn.Module):
    """x [B, T, F] -> Linear(F, h) -> nn.RNN/nn.GRU (2 layers) -> last step's state -> Linear(h, out)."""

    def __init__(self, cell: str, features: int, hidden: int, out: int, layers: int = 2):
        super().__init__()
        self.embed = nn.Linear(features, hidden)
        kind = {"rnn": nn.RNN, "gru": nn.GRU}[cell]
        self.rnn = kind(hidden, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(x))
        return self.out(h[:, -1])


# per data set: (hidden width of the sequence models, epochs, batch size, lr)
SETUPS = {"sunspots": (16, 100, 32, 3e-3), "italy_power": (32, 100, 16, 3e-3)}


def experiment_factory(name: str):
    hidden, epochs, batch, lr = SETUPS[name]

    def make(seed: int) -> C.Experiment:
        ds = C.rpn2c.data.load(name, seed=seed)
        (xtr, ytr), (xte, yte) = ds.train, ds.test
        _, steps, feats = xtr.shape
        out = ds.output_dim
        if ds.task == "regression":
            note = (f"{name}: {C.rpn2c.data.available()[name]}; chronological split, series standardized with "
                    "training-period statistics, MSE in standardized units (the seed changes only the "
                    "initialisation and the batch order).")
        else:
            note = (f"{name}: {C.rpn2c.data.available()[name]}; the UCR archive's fixed train/test files (the "
                    "seed changes only the initialisation and the batch order).")
        models = {
            "rpn2_mean": (C.spec_model("chain_seq.rpn", "chain_mean", features=feats, hidden=hidden, out=out),
                          "RPN 2 spec", "examples/specs/chain_seq.rpn chain_mean: chain heads, mean readout"),
            "rpn2_flat": (C.spec_model("chain_seq.rpn", "chain_flat", features=feats, hidden=hidden, steps=steps,
                                       out=out),
                          "RPN 2 spec", "examples/specs/chain_seq.rpn chain_flat: chain heads, flatten readout"),
            "rpn2_rec": (C.spec_model("recurrent_seq.rpn", "recurrent_mean", features=feats, hidden=hidden, out=out),
                         "RPN 2 spec", "examples/specs/recurrent_seq.rpn: rpn2c's exact recurrent layer "
                                       "(cell = rnn, 2 layers), mean readout"),
            "rnn": (lambda: Recurrent("rnn", feats, hidden, out), "backbone", "Linear + 2-layer nn.RNN(tanh)"),
            "gru": (lambda: Recurrent("gru", feats, hidden, out), "backbone", "Linear + 2-layer nn.GRU"),
            "mlp": (lambda: C.MLP([steps * feats, 64, 64, out]), "MLP", f"{steps * feats}-64-64-{out}"),
        }
        return C.Experiment(name, ds.task, C.Split({"x": xtr}, ytr), C.Split({"x": xte}, yte), models,
                            epochs=epochs, lr=lr, batch_size=batch, notes=note)

    return make


def main(argv: list[str] | None = None) -> dict:
    p = C.parser(__doc__.splitlines()[0], "training epochs (default: 100 per data set)")
    p.add_argument("--datasets", default="sunspots,italy_power",
                   help=f"comma-separated subset of {','.join(SETUPS)}")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    exps = []
    for name in C.dataset_names(p, args, SETUPS):
        exps.append(C.run_experiment(experiment_factory(name), range(args.seeds), args.epochs))
    return C.report("chain_timeseries", argv, args, exps, started)


if __name__ == "__main__":
    main(sys.argv[1:])
