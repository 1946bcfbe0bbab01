"""Multi-channel heads (paper eq 30–31) equal the formula written out in torch.

One head, C channels: every channel c shares κ and the instance ξ and has its own ψ weights W_c; the channel terms
`A κ(X) W_cᵀ + b` are fused by the channel fusion. (The bias sits inside every term, as in eq 30, so a `sum`
fusion counts it C times; `mean`, `max` and `concat` are what the formula says with it there too.)"""

from __future__ import annotations

import pytest
import torch

import rpn2c

F64 = torch.float64
FUSE = {
    "concat": lambda o: torch.cat(list(o), -1),
    "mean": lambda o: o.mean(0),
    "sum": lambda o: o.sum(0),
    "max": lambda o: o.max(0).values,
}


def _spec(fusion: str, channels: int) -> str:
    return ("model m { input x: sequence[B, 6, 5]  y = head(x) { kappa = chebyshev(d = 2)  "
            "xi_instance = chain(direction = \"forward\", self_loop = true)  out = 4  "
            f"channels = {channels}  channel_fusion = {fusion} }} return y }}")


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
@pytest.mark.parametrize("fusion", sorted(FUSE))
def test_channels_equal_the_fused_per_channel_formula(fusion, reference):
    C = 3
    torch.manual_seed(0)
    model = rpn2c.compile(_spec(fusion, C), reference=reference).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    state = model.state_dict()
    W = [state[f"y.psi.{c}.weight"] for c in range(C)]
    b = state["y.bias"]
    x = torch.randn(2, 6, 5, dtype=F64)
    # κ: Chebyshev T1, T2 of every attribute, attribute-major; ξ: forward chain with self-loop (item i reads i − 1, i)
    k = torch.stack([torch.special.chebyshev_polynomial_t(x, n) for n in (1, 2)], -1).flatten(-2)
    A = torch.eye(6, dtype=F64) + torch.diag(torch.ones(5, dtype=F64), -1)
    kx = torch.einsum("ij,bjd->bid", A, k)
    terms = torch.stack([kx @ w.T + b for w in W])
    torch.testing.assert_close(model(x=x), FUSE[fusion](terms))


def test_one_channel_is_the_plain_head():
    torch.manual_seed(1)
    model = rpn2c.compile(_spec("mean", 1)).double()
    plain = rpn2c.compile(_spec("mean", 1).replace("channels = 1  channel_fusion = mean", "")).double()
    plain.load_state_dict(model.state_dict())
    x = torch.randn(3, 6, 5, dtype=F64)
    torch.testing.assert_close(plain(x=x), model(x=x))
