"""The shipped specs (specs/*.rpn, unedited) against equivalent hand-written torch models, weights transferred by
hand, outputs compared in float64 in both lowerings.

- cnn.rpn = Conv2d/ReLU/MaxPool2d x2 + Flatten + Linear/ReLU/Dropout + Linear (exact);
- gcn.rpn = two PyG GCNConv layers with ReLU/Dropout between (exact), and two dense Kipf layers on graphs without
  self-loops (exact);
- transformer.rpn = nn.TransformerEncoderLayer(32, 4, 64, dropout=0, batch_first=True), post-norm (exact);
- rnn.rpn = Linear + a 2-layer nn.GRU + mean over time + Linear (exact; the recurrent construct);
- rnn_chain.rpn = the paper's one-step chain layers (eq 175): h' = tanh(A·H·Uᵀ + b + H), A the chain matrix, against
  a hand-written module computing exactly that. This is NOT nn.RNN: it feeds back the layer's input at t-1, not
  its own output; test_rnn_chain_spec_is_not_nn_rnn pins where the two agree (t = 0) and differ (t >= 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close
from unification_helpers import rand

import rpn2c

SPECS = Path(__file__).resolve().parents[2] / "specs"


def _compiled(name: str, state: dict, reference: bool):
    model = rpn2c.compile((SPECS / f"{name}.rpn").read_text(), f"{name}.rpn", reference=reference).double()
    model.load_state_dict({k: v.detach() for k, v in state.items()})  # strict: every compiled tensor is mapped
    return model.eval()


def _linear(prefix: str, lin: nn.Linear) -> dict:
    return {f"{prefix}.psi.weight": lin.weight, f"{prefix}.bias": lin.bias}


# ------------------------------------------------------------------------------------------------ CNN
def test_cnn_spec_equals_torch_lenet():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(128, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10)).double().eval()
    state = {"c1.psi.weight": net[0].weight.reshape(16, -1), "c1.bias": net[0].bias,  # kernel -> ψ [16, 1·9]
             "c2.psi.weight": net[3].weight.reshape(32, -1), "c2.bias": net[3].bias,  # ψ [32, 16·9]
             **_linear("h", net[7]), **_linear("y", net[10])}
    x = rand(4, 1, 8, 8)
    for reference in (False, True):
        assert_close(_compiled("cnn", state, reference)(x), net(x).detach())


# ------------------------------------------------------------------------------------------------ GCN
class _DenseKipf(nn.Module):
    """Â X W + b with Â = D^-1/2 (A + I) D^-1/2, A[target, source] = 1 (dense; equals GCNConv without self-loops
    in the edge list)."""

    def __init__(self, fin, fout):
        super().__init__()
        self.lin = nn.Linear(fin, fout)

    def forward(self, x, edges):
        n = x.shape[0]
        a = torch.zeros(n, n, dtype=x.dtype).index_put_((edges[1], edges[0]), torch.ones(edges.shape[1], dtype=x.dtype),
                                                        accumulate=True) + torch.eye(n, dtype=x.dtype)
        d = a.sum(-1).rsqrt()
        return (d[:, None] * a * d[None, :]) @ (x @ self.lin.weight.T) + self.lin.bias  # bias after aggregation


class _TwoLayerGCN(nn.Module):
    def __init__(self, make):
        super().__init__()
        self.conv1, self.conv2 = make(34, 16), make(16, 2)

    def forward(self, x, edges):
        h = F.dropout(torch.relu(self.conv1(x, edges)), 0.5, self.training)
        return self.conv2(h, edges)


def _random_graph(n, e, seed, self_loops):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    return ei if self_loops else ei[:, ei[0] != ei[1]]


def test_gcn_spec_equals_pyg_gcnconv():
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(1)
    net = _TwoLayerGCN(pyg.GCNConv).double().eval()
    state = {"h.psi.weight": net.conv1.lin.weight, "h.bias": net.conv1.bias,
             "y.psi.weight": net.conv2.lin.weight, "y.bias": net.conv2.bias}
    x, edges = rand(10, 34), _random_graph(10, 30, 3, self_loops=True)
    edges = torch.cat([edges[:, edges[0] != edges[1]], torch.tensor([[4], [4]])], 1)  # one self-loop, kept by both
    for reference in (False, True):
        assert_close(_compiled("gcn", state, reference)(x, edges), net(x, edges).detach())


def test_gcn_spec_equals_dense_kipf_layers():
    torch.manual_seed(2)
    net = _TwoLayerGCN(_DenseKipf).double().eval()
    state = {**_linear("h", net.conv1.lin), **_linear("y", net.conv2.lin)}
    x, edges = rand(9, 34), _random_graph(9, 25, 4, self_loops=False)
    for reference in (False, True):
        assert_close(_compiled("gcn", state, reference)(x, edges), net(x, edges).detach())


# ------------------------------------------------------------------------------------------------ Transformer
def test_transformer_spec_equals_post_norm_encoder_layer():
    torch.manual_seed(3)
    enc = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).double().eval()
    with torch.no_grad():
        for ln in (enc.norm1, enc.norm2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.normal_()
        enc.self_attn.in_proj_bias.normal_()
    w, b, r = enc.self_attn.in_proj_weight, enc.self_attn.in_proj_bias, 8
    state = {}
    for h in range(4):  # head h: rows [8h, 8h + 8) of W_q, W_k, W_v (ξ stores W_q, W_k as [d, rank])
        rows = slice(h * r, (h + 1) * r)
        p = f"y.attn.heads.h{h}"
        state[f"{p}.xi_instance.w_q"] = w[:32][rows].T
        state[f"{p}.xi_instance.w_k"] = w[32:64][rows].T
        state[f"{p}.xi_instance.b_q"] = b[:32][rows]
        state[f"{p}.xi_instance.b_k"] = b[32:64][rows]
        state[f"{p}.psi.weight"] = w[64:][rows]
        state[f"{p}.bias"] = b[64:][rows]
    state.update({"y.attn.fusion.linear.weight": enc.self_attn.out_proj.weight,
                  "y.attn.fusion.linear.bias": enc.self_attn.out_proj.bias,
                  "y.attn.post.0.weight": enc.norm1.weight, "y.attn.post.0.bias": enc.norm1.bias,
                  **_linear("y.ff", enc.linear1), **_linear("y.ff2", enc.linear2),
                  "y.y.weight": enc.norm2.weight, "y.y.bias": enc.norm2.bias})
    x = rand(3, 5, 32)
    for reference in (False, True):
        assert_close(_compiled("transformer", state, reference)(x), enc(x).detach())


# ------------------------------------------------------------------------------------------------ RNN
def test_rnn_spec_equals_linear_gru_readout():
    torch.manual_seed(6)
    embed, gru, out = nn.Linear(8, 32).double(), nn.GRU(32, 32, num_layers=2, batch_first=True).double(), \
        nn.Linear(32, 4).double()
    state = {**_linear("e", embed), **_linear("y", out), **{f"r.{k}": v for k, v in gru.named_parameters()}}
    x = rand(3, 6, 8)
    want = out(gru(embed(x))[0].mean(1)).detach()
    for reference in (False, True):
        assert_close(_compiled("rnn", state, reference)(x), want)


class PaperChainRNN(nn.Module):
    """rnn_chain.rpn by hand: e = x Wᵀ + b; h1_t = tanh(e_{t-1} U1ᵀ + b1 + e_t) (e_{-1} = 0, eq 173/175);
    h2_t = tanh(m_t U2ᵀ + b2 + h1_t) with m_t the mean of h1 over the steps t-2..t that exist (the row-normalised
    2-hop accumulated chain); r = mean_t h2; y = r Vᵀ + c. No state is fed back: a causal convolution."""

    def __init__(self, features=8, hidden=32, classes=4):
        super().__init__()
        self.embed, self.u1, self.u2 = nn.Linear(features, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    @staticmethod
    def shift(h, k):
        """h_{t-k}, zero before the start."""
        return F.pad(h, (0, 0, k, 0))[:, : h.shape[1]]

    def forward(self, x):
        e = self.embed(x)
        h1 = torch.tanh(self.u1(self.shift(e, 1)) + e)
        t = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).clamp(max=3)[None, :, None]
        m = (h1 + self.shift(h1, 1) + self.shift(h1, 2)) / t
        h2 = torch.tanh(self.u2(m) + h1)
        return self.out(h2.mean(1))


def _rnn_state(net):
    return {**_linear("e", net.embed), **_linear("h1", net.u1), **_linear("h2", net.u2), **_linear("y", net.out)}


def test_rnn_chain_spec_equals_the_papers_chain_layers():
    torch.manual_seed(4)
    net = PaperChainRNN().double().eval()
    x = rand(3, 6, 8)
    for reference in (False, True):
        assert_close(_compiled("rnn_chain", _rnn_state(net), reference)(x), net(x).detach())


def test_rnn_chain_spec_is_not_nn_rnn():
    """The paper's layer h1 = tanh(S·E·U1ᵀ + b1 + E) vs nn.RNN on the same E with W_ih = I, b_ih = b1, W_hh = U1:
    equal at t = 0 (nothing fed back yet), different from t = 1 on (the RNN feeds back tanh(...), the chain layer
    the raw e_{t-1}) -- catalog §5.2, §8 item 14. nn.RNN itself converts to the exact `recurrent` construct."""
    torch.manual_seed(5)
    net = PaperChainRNN().double().eval()
    model = _compiled("rnn_chain", _rnn_state(net), False)
    seen = {}
    model.emit(inline=False)  # layer hooks need module calls
    model.h1.register_forward_hook(lambda mod, args, out: seen.setdefault("h1", out))
    x = rand(2, 5, 8)
    model(x)
    e = net.embed(x)
    rnn = nn.RNN(32, 32, batch_first=True).double()
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(torch.eye(32))
        rnn.bias_ih_l0.copy_(net.u1.bias)
        rnn.weight_hh_l0.copy_(net.u1.weight)
        rnn.bias_hh_l0.zero_()
    h_rnn = rnn(e)[0].detach()
    assert_close(seen["h1"][:, 0], h_rnn[:, 0])
    assert (seen["h1"][:, 1:] - h_rnn[:, 1:]).abs().amax() > 1e-3
