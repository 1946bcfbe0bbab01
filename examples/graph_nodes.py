"""RPN 2 graph-interdependence spec vs a hand-written GCN vs an MLP on real graphs (node classification).

The small-scale analogue of the paper's Table 6 (there: Cora / Citeseer / Pubmed, architectures [in, 16, out],
20 labelled nodes per class, 1,000 test nodes):

  karate      Zachary's karate club (networkx): 34 members, 78 ties, 2 clubs; features = one-hot identity
              (x = I_34); seeded stratified 50/50 node split (17 / 17), a new split per seed
  drosophila  larval Drosophila mushroom-body connectome, left side (graspologic data files): 209 neurons,
              4 cell types; 4 standardized degree features; seeded stratified 80/20 node split. Run only when
              the files are found: `pip install --no-deps graspologic`, or `--drosophila-root DIR` holding
              left_adjacency.csv and left_cell_labels.csv (they are inside the graspologic wheel).

    python examples/graph_nodes.py [--seeds 3] [--epochs 200] [--datasets karate,drosophila]
                                   [--drosophila-root DIR] [--out F]

Models (all [in, 16, out], full-batch transductive training, Adam lr 0.01, weight decay 5e-4, dropout 0.5):
  rpn2      examples/specs/gcn_nodes.rpn gcn_nodes: two heads with a graph instance ξ (D^-1/2 (A+I) D^-1/2)
  rpn2_gat  examples/specs/gcn_nodes.rpn gat_nodes: graph head, then a bilinear ξ masked by the graph
            (the paper's "graph ∘ bilinear" hybrid row, as a masked softmax)
  gcn       the GCN written in plain torch with the dense normalised adjacency
  mlp       [in, 16, out] on node features only (no edges), same dropout
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

import _common as C


def normalized_adjacency(edges: torch.Tensor, n: int) -> torch.Tensor:
    """Dense Â = D^-1/2 (A + I) D^-1/2 from an edge index (A[target, source] = 1)."""
    a = torch.zeros(n, n)
    a[edges[1], edges[0]] = 1.0
    a = a + torch.eye(n)
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


class GCN(nn.Module):
    """Kipf & Welling (as torch_geometric's GCNConv, bias added after aggregation):
    y = Â · dropout(relu(Â · dropout(x) · W1 + b1)) · W2 + b2, with Â precomputed once."""

    def __init__(self, adj: torch.Tensor, features: int, hidden: int, classes: int, p: float = 0.5):
        super().__init__()
        self.register_buffer("adj", adj)
        self.lin1 = nn.Linear(features, hidden, bias=False)
        self.lin2 = nn.Linear(hidden, classes, bias=False)
        self.b1, self.b2 = nn.Parameter(torch.zeros(hidden)), nn.Parameter(torch.zeros(classes))
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor, **_: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.adj @ self.lin1(self.drop(x)) + self.b1))
        return self.adj @ self.lin2(h) + self.b2


HIDDEN, EPOCHS = 16, 200
SPLITS = {"karate": "seeded stratified 50/50 node split per seed",
          "drosophila": "seeded stratified 80/20 node split per seed"}


def experiment_factory(name: str, root: str | None):
    def make(seed: int) -> C.Experiment:
        ds = C.rpn2c.data.load(name, seed=seed, root=root if name == "drosophila" else None)
        x, edges, y, train_mask = ds.train
        test_mask = ds.test[3]
        n, f = x.shape
        k = ds.num_classes
        adj = normalized_adjacency(edges, n)
        keep = (adj > 0)  # neighbours and self
        inputs = {"x": x, "edges": edges, "adj": keep}
        models = {
            "rpn2": (C.spec_model("gcn_nodes.rpn", "gcn_nodes", features=f, hidden=HIDDEN, classes=k),
                     "RPN 2 spec", "examples/specs/gcn_nodes.rpn gcn_nodes: graph ξ heads"),
            "rpn2_gat": (C.spec_model("gcn_nodes.rpn", "gat_nodes", features=f, hidden=HIDDEN, classes=k),
                         "RPN 2 spec", "examples/specs/gcn_nodes.rpn gat_nodes: graph ξ head + graph-masked "
                                       "bilinear ξ head"),
            "gcn": (lambda: GCN(adj, f, HIDDEN, k), "backbone", "plain torch GCN, dense normalised adjacency"),
            "mlp": (lambda: C.MLP([f, HIDDEN, k], dropout=0.5), "MLP", f"{f}-{HIDDEN}-{k}, node features only"),
        }
        note = (f"{name}: {C.rpn2c.data.available()[name]}; {SPLITS[name]} "
                f"({int(train_mask.sum())} train / {int(test_mask.sum())} test nodes).")
        return C.Experiment(name, "classification", C.Split(inputs, y, train_mask), C.Split(inputs, y, test_mask),
                            models, epochs=EPOCHS, lr=0.01, batch_size=None, weight_decay=5e-4, notes=note)

    return make


def main(argv: list[str] | None = None) -> dict:
    p = C.parser(__doc__.splitlines()[0], f"training epochs (default {EPOCHS})")
    p.add_argument("--datasets", default="karate,drosophila", help="comma-separated subset of karate,drosophila")
    p.add_argument("--drosophila-root", default=None,
                   help="folder with left_adjacency.csv / left_cell_labels.csv (default: the graspologic package)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    exps = []
    for name in C.dataset_names(p, args, SPLITS):
        try:
            C.rpn2c.data.load(name, seed=0, root=args.drosophila_root if name == "drosophila" else None)
        except ImportError as err:
            print(f"skipping {name}: {err}")
            continue
        exps.append(C.run_experiment(experiment_factory(name, args.drosophila_root), range(args.seeds),
                                     args.epochs))
    return C.report("graph_nodes", argv, args, exps, started)


if __name__ == "__main__":
    main(sys.argv[1:])
