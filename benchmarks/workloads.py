"""Benchmark workloads: each builds a compiled rpn2c spec and the hand-written torch/PyG module it equals.

A workload's ``build(sizes)`` returns a :class:`Pair`: both modules with the same weights (copied from the
hand-written side), and an ``inputs(small)`` function giving the timing inputs (``small=True``: a small input for
the float64 equality check). ``kind = "build"`` workloads have no hand-written side and time the compiler itself.

Each workload belongs to one or more *profiles*: ``cpu`` (the default run) and ``gpu`` (the sizes people train on a
GPU: a 4-layer d=1024 Transformer, ResNet-18 at B=128, a 2-layer LSTM with H=512, GCN on 2M nodes). Their
``quick`` sizes are tiny, so every workload also runs on a CPU as a smoke test.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

import rpn2c

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Pair:
    """A compiled spec (``spec``) and the hand-written module (``hand``) computing the same function."""

    spec: nn.Module
    hand: nn.Module
    inputs: Callable[[bool], tuple]
    title: str
    note: str = ""
    loss: Callable | None = None  # (output, inputs) -> training loss; None: the mean of the output's squares
    optimizer: bool = False  # the timed training step also takes an AdamW step (fused on CUDA)
    flops: int | None = None  # FLOPs of a training step by formula; None: counted (FlopCounterMode)
    tokens: int | None = None  # tokens per training step, for a tokens/s figure


@dataclass
class Workload:
    """A named benchmark: ``build(sizes)`` gives a :class:`Pair` (or, for ``kind = "build"``, spec text)."""

    name: str
    description: str
    build: Callable[[dict], object]
    sizes: dict
    quick: dict
    kind: str = "pair"  # "pair" or "build"
    in_quick: bool = True
    needs_bytes: Callable[[dict], int] | None = None  # rough peak memory estimate; skipped if not available
    tol: float = 1e-8
    profiles: tuple[str, ...] = ("cpu",)  # the runs (``--profile``) that select it by default
    autocast: bool = False  # timed under torch.autocast(dtype=torch.bfloat16), parameters kept in --dtype


WORKLOADS: dict[str, Workload] = {}


def workload(name, description, sizes, quick, **kw):
    """Register the decorated builder as workload ``name``."""

    def deco(fn):
        WORKLOADS[name] = Workload(name, description, fn, sizes, quick, **kw)
        return fn
    return deco


def gpu_workload(name, description, build, sizes, quick, autocast=True, **kw):
    """Register ``build`` (again) as GPU-profile workload ``name``, by default under bf16 autocast."""
    WORKLOADS[name] = Workload(name, description, build, sizes, quick, profiles=("gpu",), autocast=autocast, **kw)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _load(module: nn.Module, tensors: dict) -> None:
    """Load ``tensors`` (reshaped to the module's shapes) into ``module``; every key must be covered."""
    state = module.state_dict()
    missing, extra = set(state) - set(tensors), set(tensors) - set(state)
    if missing or extra:
        raise KeyError(f"weight map mismatch: missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}")
    module.load_state_dict({k: v.detach().reshape(state[k].shape).clone() for k, v in tensors.items()})


def _randomize_bn(module: nn.Module, g: torch.Generator) -> None:
    """Non-trivial BatchNorm statistics and affine parameters, so the equality check sees them."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)


def _converted(module: nn.Module, args: tuple, kwargs: dict | None = None) -> nn.Module:
    """``rpn2c.from_torch`` of ``module``, compiled, with the module's weights loaded."""
    ts = rpn2c.from_torch(module, args, kwargs)
    spec = rpn2c.compile(ts.text)
    spec.load_state_dict(ts.state_dict)
    return spec


class _Call(nn.Module):
    """Wraps a module whose forward needs fixed keyword arguments or returns a tuple."""

    def __init__(self, inner: nn.Module, fn: Callable):
        super().__init__()
        self.inner, self.fn = inner, fn

    def forward(self, *args):
        return self.fn(self.inner, *args)


# ------------------------------------------------------------------------------------------------ 1. LeNet
@workload("lenet", "LeNet-style CNN on 32x32x3 (from_torch of an nn.Sequential)",
          sizes={"batch": 64}, quick={"batch": 8})
def lenet(s):
    torch.manual_seed(0)
    hand = nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))
    spec = _converted(hand, (torch.randn(2, 3, 32, 32),))
    b = s["batch"]
    return Pair(spec, hand, lambda small: (torch.randn(2 if small else b, 3, 32, 32, generator=_gen()),),
                f"lenet (32x32x3, B={b})")


# ------------------------------------------------------------------------------------------------ 2. ResNet-18
RESNET_SPEC = """
block basic(c) {
  input x
  a = head(x) { xi_attribute = grid_patch(size = 3, pad = 1) out = c bias = false post = [batch_norm, relu] }
  b = head(a) { xi_attribute = grid_patch(size = 3, pad = 1) out = c bias = false post = [batch_norm] }
  y = relu(add(x, b))
  return y
}
block down(c) {
  input x
  a = head(x) { xi_attribute = grid_patch(size = 3, stride = 2, pad = 1) out = c bias = false post = [batch_norm, relu] }
  b = head(a) { xi_attribute = grid_patch(size = 3, pad = 1) out = c bias = false post = [batch_norm] }
  s = head(x) { xi_attribute = grid_patch(size = 1, stride = 2) out = c bias = false post = [batch_norm] }
  y = relu(add(s, b))
  return y
}
model resnet18(size = 224, width = 64, classes = 1000) {
  input x: image[B, 3, size, size]
  stem = head(x) { xi_attribute = grid_patch(size = 7, stride = 2, pad = 3) out = width bias = false post = [batch_norm, relu] }
  p = compress(stem) { kappa = patch_max(size = 3, stride = 2, pad = 1) }
  l1a = basic(p, c = width)
  l1b = basic(l1a, c = width)
  l2a = down(l1b, c = width * 2)
  l2b = basic(l2a, c = width * 2)
  l3a = down(l2b, c = width * 4)
  l3b = basic(l3a, c = width * 4)
  l4a = down(l3b, c = width * 8)
  l4b = basic(l4a, c = width * 8)
  g = pool_items(l4b, how = "mean")
  y = head(g) { out = classes }
  return y
}
"""


class BasicBlock(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.down = None
        if stride != 1 or cin != c:
            self.down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu((x if self.down is None else self.down(x)) + y)


class ResNet18(nn.Module):
    """torchvision's resnet18 architecture, written out (torchvision is not a dependency)."""

    def __init__(self, width=64, classes=1000):
        super().__init__()
        w = width
        self.conv1, self.bn1 = nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w)
        chans = [(w, w, 1), (w, w, 1), (w, 2 * w, 2), (2 * w, 2 * w, 1), (2 * w, 4 * w, 2), (4 * w, 4 * w, 1),
                 (4 * w, 8 * w, 2), (8 * w, 8 * w, 1)]
        self.blocks = nn.Sequential(*[BasicBlock(*c) for c in chans])
        self.fc = nn.Linear(8 * w, classes)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        return self.fc(self.blocks(x).mean((2, 3)))

    def spec_weights(self):
        out = {}

        def head(prefix, conv, bn):
            out[prefix + ".psi.weight"] = conv.weight.flatten(1)
            for k in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                out[f"{prefix}.post.0.bn.{k}"] = getattr(bn, k)

        head("stem", self.conv1, self.bn1)
        for name, blk in zip(["l1a", "l1b", "l2a", "l2b", "l3a", "l3b", "l4a", "l4b"], self.blocks):
            head(f"{name}.a", blk.conv1, blk.bn1)
            head(f"{name}.b", blk.conv2, blk.bn2)
            if blk.down is not None:
                head(f"{name}.s", blk.down[0], blk.down[1])
        out["y.psi.weight"], out["y.bias"] = self.fc.weight, self.fc.bias
        return out


@workload("resnet18", "ResNet-18 (with BatchNorm) hand-written spec vs a torch ResNet-18",
          sizes={"batch": 8, "size": 224, "width": 64, "classes": 1000},
          quick={"batch": 2, "size": 32, "width": 8, "classes": 10})
def resnet18(s):
    torch.manual_seed(0)
    hand = ResNet18(s["width"], s["classes"])
    _randomize_bn(hand, _gen(1))
    spec = rpn2c.compile(RESNET_SPEC, params={"size": s["size"], "width": s["width"], "classes": s["classes"]})
    _load(spec, hand.spec_weights())
    b, n = s["batch"], s["size"]
    return Pair(spec, hand, lambda small: (torch.randn(2 if small else b, 3, n, n, generator=_gen()),),
                f"resnet18 ({n}x{n}, B={b}, width {s['width']})",
                "BatchNorm in the spec (post = [batch_norm]); residuals by add()")


gpu_workload("resnet18-b128", "ResNet-18 (with BatchNorm) at B=128, 224x224, bf16 autocast", resnet18,
             sizes={"batch": 128, "size": 224, "width": 64, "classes": 1000}, quick=WORKLOADS["resnet18"].quick)


# ------------------------------------------------------------------------------------------------ 3. Chebyshev
class ChebConv(nn.Module):
    """κ = [T1(x), T2(x)] per input channel (channels ordered (channel, degree)), then a 3x3 convolution.

    The zero padding is applied before the expansion (as the spec's ξ-then-κ order implies): padded taps see
    κ(0) = [0, -1].
    """

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(2 * cin, cout, 3)

    def forward(self, x):
        x = F.pad(x, (1, 1, 1, 1))
        return self.conv(torch.stack([x, 2 * x * x - 1], 2).flatten(1, 2))


CHEB_SPEC = """
model cheb(cin = 16, cout = 32, size = 64) {
  input x: image[B, cin, size, size]
  y = head(x) { kappa = chebyshev(d = 2) xi_attribute = grid_patch(size = 3, pad = 1) out = cout }
  return y
}
"""


def _cheb_weights(hand: ChebConv, cin: int) -> dict:
    w = hand.conv.weight  # [out, (channel, degree), 3, 3]
    out = w.shape[0]
    # spec ψ columns: κ applied to each tap of the zero-padded im2col vector: (channel, tap, degree)
    return {"y.psi.weight": w.reshape(out, cin, 2, 9).transpose(2, 3).reshape(out, -1), "y.bias": hand.conv.bias}


@workload("chebyshev", "Chebyshev (d=2) expansion of 3x3 grid patches vs a conv over [T1(x), T2(x)]",
          sizes={"batch": 32, "cin": 16, "cout": 32, "size": 64}, quick={"batch": 4, "cin": 4, "cout": 8, "size": 16})
def chebyshev(s):
    torch.manual_seed(0)
    hand = ChebConv(s["cin"], s["cout"])
    spec = rpn2c.compile(CHEB_SPEC, params={k: s[k] for k in ("cin", "cout", "size")})
    _load(spec, _cheb_weights(hand, s["cin"]))
    b, n = s["batch"], s["size"]
    return Pair(spec, hand, lambda small: (torch.randn(2 if small else b, s["cin"], n, n, generator=_gen()) * 0.5,),
                f"chebyshev d=2 ({s['cin']}->{s['cout']}, {n}x{n}, B={b})")


# ------------------------------------------------------------------------------------------------ 4. Taylor
class TaylorPatch(nn.Module):
    """im2col (F.unfold) of 3x3 patches p, κ(p) = [p, p⊗p], then a linear map per position."""

    def __init__(self, cin, cout):
        super().__init__()
        m = cin * 9
        self.lin = nn.Linear(m + m * m, cout)

    def forward(self, x):
        p = F.unfold(x, 3, padding=1).transpose(1, 2)  # [B, L, m]: one item per position
        z = torch.cat([p, (p.unsqueeze(-1) * p.unsqueeze(-2)).flatten(2)], -1)
        return self.lin(z)  # [B, L, out]


TAYLOR_SPEC = """
model taylor(cin = 4, cout = 16, size = 16) {
  input x: image[B, cin, size, size]
  y = head(x) { xi_attribute = grid_patch(size = 3, pad = 1)  kappa = taylor(d = 2)  out = cout }
  return y
}
"""


@workload("taylor", "Taylor (d=2) expansion of 3x3 patches vs unfold + outer product + linear",
          sizes={"batch": 8, "cin": 4, "cout": 16, "size": 16}, quick={"batch": 2, "cin": 2, "cout": 4, "size": 8})
def taylor(s):
    torch.manual_seed(0)
    hand = TaylorPatch(s["cin"], s["cout"])
    spec = rpn2c.compile(TAYLOR_SPEC, params={k: s[k] for k in ("cin", "cout", "size")})
    _load(spec, {"y.psi.weight": hand.lin.weight, "y.bias": hand.lin.bias})
    b, n = s["batch"], s["size"]

    def as_image(m, x):  # [B, P, cout] -> [B, cout, H, W], the grid head's layout
        return m(x).transpose(1, 2).reshape(x.shape[0], -1, n, n)

    return Pair(spec, _Call(hand, as_image),
                lambda small: (torch.randn(2 if small else b, s["cin"], n, n, generator=_gen()),),
                f"taylor d=2 on 3x3 patches ({s['cin']}->{s['cout']}, {n}x{n}, B={b})",
                "grid head: patches by im2col (rule unfold_patches), ψ by degree blocks without κ (rule degree_blocks)")


# ------------------------------------------------------------------------------------------------ 5. GCN
def _graph(n, e, g):
    edges = torch.randint(0, n, (2, e // 2), generator=g)
    edges = torch.cat([edges, edges.flip(0)], 1)
    return edges[:, edges[0] != edges[1]]


class PygGCN(nn.Module):
    """Two torch_geometric GCNConv layers, ReLU and dropout between (as specs/gcn.rpn)."""

    def __init__(self, f, h, c, cached):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.a, self.b = GCNConv(f, h, cached=cached), GCNConv(h, c, cached=cached)

    def forward(self, x, edges):
        return self.b(F.dropout(torch.relu(self.a(x, edges)), 0.5, self.training), edges)


def _gcn(s):
    torch.manual_seed(0)
    hand = PygGCN(s["features"], s["hidden"], s["classes"], bool(s["cached"]))
    # the memory budget of a graph this size: the default 4 GiB per sample refuses 2M nodes' edge messages (7 GiB
    # estimated), as a user on a large GPU would raise it (--max-memory)
    spec = rpn2c.compile_file(ROOT / "specs/gcn.rpn", params={k: s[k] for k in ("features", "hidden", "classes")},
                              limits={"max_memory": max(4 * 2**30, _gcn_bytes(s))})
    _load(spec, {"h.psi.weight": hand.a.lin.weight, "h.bias": hand.a.bias,
                 "y.psi.weight": hand.b.lin.weight, "y.bias": hand.b.bias})
    n, e = s["nodes"], s["edges"]
    big = None

    def inputs(small):
        nonlocal big
        if small:
            g = _gen(1)
            return torch.randn(50, s["features"], generator=g), _graph(50, 300, g)
        if big is None:  # one graph per build: the edge tensor (and both sides' caches) stay the same
            g = _gen(1)
            big = (torch.randn(n, s["features"], generator=g), _graph(n, e, g))
        return big

    return Pair(spec, hand, inputs, f"gcn (N={n:,}, E≈{e:,}, {s['features']}-{s['hidden']}-{s['classes']})",
                "PyG GCNConv(cached=True): both sides reuse the normalised graph" if s["cached"] else "")


def _gcn_bytes(s):
    # edges (int64, both directions) + per-edge messages of the widest layer, forward and backward, x2 safety
    return int(2 * (s["edges"] * 8 * 4 + s["edges"] * max(s["features"], s["hidden"]) * 4 * 3
                    + s["nodes"] * (s["features"] + s["hidden"]) * 4 * 4))


_GCN = {"features": 64, "hidden": 64, "classes": 16, "cached": 1}
# gcn-2m is also the GPU profile's graph workload (float32: graph propagation has no autocast rule); it stays out of
# the CPU profile's --quick run, and its quick sizes serve smoke runs of the GPU profile
for _name, _n, _e, _qn, _qe in (("gcn-20k", 20_000, 200_000, 2_000, 20_000),
                                ("gcn-200k", 200_000, 2_000_000, 5_000, 50_000),
                                ("gcn-2m", 2_000_000, 20_000_000, 2_000, 20_000)):
    WORKLOADS[_name] = Workload(_name, f"2-layer GCN vs torch_geometric GCNConv at {_n:,} nodes / {_e:,} edges",
                                _gcn, {**_GCN, "nodes": _n, "edges": _e}, {**_GCN, "nodes": _qn, "edges": _qe},
                                in_quick=_name != "gcn-2m", needs_bytes=_gcn_bytes, tol=1e-8,
                                profiles=("cpu", "gpu") if _name == "gcn-2m" else ("cpu",))


# ------------------------------------------------------------------------------------------------ 6. LSTM, Transformer
def _seq(small, b, t, f):
    """A [B, T, F] input: [2, 8, F] when ``small`` (the equality check)."""
    return torch.randn(2 if small else b, 8 if small else t, f, generator=_gen())


@workload("lstm", "LSTM vs nn.LSTM (from_torch)", sizes={"batch": 32, "T": 128, "H": 128},
          quick={"batch": 4, "T": 16, "H": 16})
def lstm(s):
    torch.manual_seed(0)
    layers = s.get("layers", 1)
    inner = nn.LSTM(s["H"], s["H"], layers, batch_first=True)
    spec = _converted(inner, (torch.randn(2, 4, s["H"]),))
    hand = _Call(inner, lambda m, x: m(x)[0])
    b, t = s["batch"], s["T"]
    return Pair(spec, hand, lambda small: (_seq(small, b, t, s["H"]),),
                f"lstm (T={t}, H={s['H']}, B={b}{f', {layers} layers' if layers > 1 else ''})")


gpu_workload("lstm-2x512", "2-layer LSTM (H=512, T=256, B=64) vs nn.LSTM (from_torch), bf16 autocast", lstm,
             sizes={"batch": 64, "T": 256, "H": 512, "layers": 2}, quick={"batch": 4, "T": 16, "H": 16, "layers": 2})


@workload("transformer", "Transformer encoder layer vs nn.TransformerEncoderLayer (from_torch)",
          sizes={"batch": 8, "T": 256, "d": 256, "heads": 8, "ffn": 1024},
          quick={"batch": 2, "T": 16, "d": 32, "heads": 4, "ffn": 64})
def transformer(s):
    torch.manual_seed(0)
    hand = nn.TransformerEncoderLayer(s["d"], s["heads"], s["ffn"], dropout=0.0, batch_first=True)
    spec = _converted(hand, (torch.randn(2, 4, s["d"]),))
    b, t = s["batch"], s["T"]
    return Pair(spec, hand, lambda small: (_seq(small, b, t, s["d"]),),
                f"transformer layer (T={t}, d={s['d']}, heads {s['heads']}, B={b})",
                "post-norm, dropout 0; torch's no-grad forward takes its fused fast path")


def transformer_stack(s):
    """``nn.TransformerEncoder`` of ``layers`` pre-norm layers (dropout 0) against its ``from_torch`` spec."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(s["d"], s["heads"], s["ffn"], dropout=0.0, batch_first=True, norm_first=True)
    hand = nn.TransformerEncoder(layer, s["layers"], enable_nested_tensor=False)
    spec = _converted(hand, (torch.randn(2, 4, s["d"]),))
    b, t = s["batch"], s["T"]
    return Pair(spec, hand, lambda small: (_seq(small, b, t, s["d"]),),
                f"transformer encoder ({s['layers']} pre-norm layers, T={t}, d={s['d']}, heads {s['heads']}, "
                f"ffn {s['ffn']}, B={b})", "pre-norm, dropout 0")


gpu_workload("transformer-4x1024", "nn.TransformerEncoder: 4 pre-norm layers, d=1024, 16 heads, ffn 4096, T=1024, "
             "B=16 (from_torch), bf16 autocast", transformer_stack,
             sizes={"batch": 16, "T": 1024, "d": 1024, "heads": 16, "ffn": 4096, "layers": 4},
             quick={"batch": 2, "T": 16, "d": 32, "heads": 4, "ffn": 64, "layers": 2})


def llama(s):
    """``specs/llama.rpn`` against transformers' ``LlamaForCausalLM`` (SDPA attention, no cache) at the same size,
    the library's weights moved into the spec by the "llama" weight map; inputs are token ids, the output logits."""
    import transformers

    from rpn2c.frontends import weights

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=s["vocab"], hidden_size=s["d"], intermediate_size=s["ffn"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], max_position_embeddings=max(s["T"], 64),
        attention_dropout=0.0, tie_word_embeddings=False, attn_implementation="sdpa")
    library = transformers.LlamaForCausalLM(config)
    params = {"vocab": s["vocab"], "d": s["d"], "heads": s["heads"], "kv_heads": s["kv_heads"], "ffn": s["ffn"],
              "layers": s["layers"], "eps": config.rms_norm_eps}
    spec = rpn2c.compile((ROOT / "specs" / "llama.rpn").read_text(encoding="utf-8"), model="llama", params=params)
    spec.load_state_dict(weights.to_spec("llama", library.state_dict(), s["layers"]))
    b, t = s["batch"], s["T"]

    def ids(small):
        return (torch.randint(0, s["vocab"], (2 if small else b, 8 if small else t), generator=_gen()),)

    return Pair(spec, _Call(library, lambda m, x: m(x, use_cache=False).logits), ids,
                f"llama ({s['layers']} layers, d={s['d']}, heads {s['heads']}/{s['kv_heads']} kv, ffn {s['ffn']}, "
                f"vocab {s['vocab']}, T={t}, B={b})", "transformers LlamaForCausalLM, SDPA attention, no cache")


workload("llama", "Llama decoder (specs/llama.rpn) vs transformers' LlamaForCausalLM", sizes={
    "batch": 4, "T": 256, "d": 256, "heads": 8, "kv_heads": 2, "ffn": 688, "layers": 4, "vocab": 2048},
    quick={"batch": 2, "T": 16, "d": 32, "heads": 4, "kv_heads": 2, "ffn": 48, "layers": 2, "vocab": 64},
    tol=1e-6)(llama)  # transformers' RMSNorm computes in float32 even in a float64 model (1e-12 once it does not)
gpu_workload("llama-12x768", "Llama decoder (specs/llama.rpn), 12 layers, d=768, 12 heads / 4 kv, ffn 2048, T=1024, "
             "B=8, vocab 32000, vs LlamaForCausalLM, bf16 autocast", llama,
             sizes={"batch": 8, "T": 1024, "d": 768, "heads": 12, "kv_heads": 4, "ffn": 2048, "layers": 12,
                    "vocab": 32000},
             quick={"batch": 2, "T": 16, "d": 32, "heads": 4, "kv_heads": 2, "ffn": 48, "layers": 2, "vocab": 64},
             tol=1e-6)


def lm(s, anchor="library"):
    """``specs/gpt2.rpn`` against transformers' ``GPT2LMHeadModel`` (``anchor="library"``; SDPA attention) or the
    hand-written :class:`benchmarks.lm.NanoGPT` (``anchor="nanogpt"``), all three with the library model's
    weights (moved by the "gpt2" weight map; nanoGPT's are its Conv1D weights transposed). The timed step is a
    training step: next-token cross-entropy, backward, a fused AdamW step; FLOPs by :func:`benchmarks.lm.train_flops`."""
    import transformers

    from benchmarks import lm as LM
    from rpn2c.frontends import weights

    torch.manual_seed(0)
    config = LM.gpt2_config(s)
    library = transformers.GPT2LMHeadModel(config)
    params = {"vocab": s["vocab"], "d": s["d"], "heads": s["heads"], "ffn": 4 * s["d"], "layers": s["layers"],
              "positions": s["T"], "eps": config.layer_norm_epsilon}
    spec = rpn2c.compile((ROOT / "specs" / "gpt2.rpn").read_text(encoding="utf-8"), model="gpt2", params=params)
    state = library.state_dict()
    spec.load_state_dict(weights.to_spec("gpt2", state, s["layers"]))
    if anchor == "nanogpt":
        hand = LM.NanoGPT(s["vocab"], s["d"], s["heads"], s["layers"], s["T"], eps=config.layer_norm_epsilon)
        hand.load_state_dict(LM.nanogpt_state(state))
        del library
        title, note = "nanoGPT-style GPT-2", "hand-written: fused qkv Linear, SDPA(is_causal=True), tied LM head"
    else:
        hand = _Call(library, lambda m, x: m(x, use_cache=False).logits)
        title, note = "GPT2LMHeadModel", "transformers GPT2LMHeadModel, SDPA attention, no cache"
    b, t = s["batch"], s["T"]

    def ids(small):
        return (torch.randint(0, s["vocab"], (2 if small else b, 8 if small else t), generator=_gen()),)

    return Pair(spec, hand, ids, f"gpt2 spec vs {title} ({s['layers']} layers, d={s['d']}, heads {s['heads']}, "
                f"vocab {s['vocab']}, T={t}, B={b})", note + "; train step: cross-entropy + AdamW",
                loss=LM.next_token_loss, optimizer=True, flops=LM.train_flops(s), tokens=b * t)


_LM_QUICK = {"batch": 2, "T": 32, "d": 64, "heads": 4, "layers": 2, "vocab": 256}
_GPT2_SMALL = {"batch": 8, "T": 1024, "d": 768, "heads": 12, "layers": 12, "vocab": 50257}
gpu_workload("lm", "GPT-2 small (specs/gpt2.rpn): 12 layers, d=768, 12 heads, T=1024, B=8, vocab 50257, vs "
             "GPT2LMHeadModel; training step with AdamW, bf16 autocast", lm, sizes=_GPT2_SMALL, quick=_LM_QUICK)
gpu_workload("lm-nanogpt", "GPT-2 small (specs/gpt2.rpn) as lm, vs a nanoGPT-style module (fused qkv, SDPA, tied "
             "head); training step with AdamW, bf16 autocast", lambda s: lm(s, "nanogpt"), sizes=_GPT2_SMALL,
             quick=_LM_QUICK)


# ------------------------------------------------------------------------------------------------ 7. attention
CAUSAL_SPEC = """
model causal(d = 64, heads = 4) {
  input x: sequence[B, T, d]
  attn = head(x) {
    heads = heads
    xi_instance = attention(rank = d // heads, bias = true, causal = true)
    out = d // heads
    fusion = concat_linear(out = d)
  }
  return attn
}
"""


@workload("causal-attn", "causal self-attention (spec attention(causal = true)) vs nn.MultiheadAttention + causal mask",
          sizes={"batch": 8, "T": 256, "d": 256, "heads": 8}, quick={"batch": 2, "T": 16, "d": 32, "heads": 4})
def causal_attn(s):
    torch.manual_seed(0)
    d = s["d"]
    mha = nn.MultiheadAttention(d, s["heads"], batch_first=True)
    x = torch.randn(2, 4, d)
    ts = rpn2c.from_torch(mha, (x, x, x), {"need_weights": False})  # weights in the spec's naming
    spec = rpn2c.compile(CAUSAL_SPEC, params={"d": d, "heads": s["heads"]})
    spec.load_state_dict(ts.state_dict)

    def fn(m, x):
        t = x.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        return m(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)[0]

    b, t = s["batch"], s["T"]
    return Pair(spec, _Call(mha, fn), lambda small: (_seq(small, b, t, d),),
                f"causal attention (T={t}, d={d}, heads {s['heads']}, B={b})")


WINDOW_SPEC = CAUSAL_SPEC.replace("model causal(d = 64, heads = 4)", "model window(d = 64, heads = 4, w = 8)").replace(
    "causal = true", "window = w")


@workload("window-attn", "local-window attention (spec attention(window = w)) vs nn.MultiheadAttention + band mask",
          sizes={"batch": 1, "T": 2048, "d": 256, "heads": 8, "window": 32},
          quick={"batch": 2, "T": 64, "d": 32, "heads": 4, "window": 4})
def window_attn(s):
    torch.manual_seed(0)
    d, w = s["d"], s["window"]
    mha = nn.MultiheadAttention(d, s["heads"], batch_first=True)
    x = torch.randn(2, 4, d)
    ts = rpn2c.from_torch(mha, (x, x, x), {"need_weights": False})  # weights in the spec's naming
    spec = rpn2c.compile(WINDOW_SPEC, params={"d": d, "heads": s["heads"], "w": w})
    spec.load_state_dict(ts.state_dict)

    def fn(m, x):
        i = torch.arange(x.shape[1], device=x.device)
        mask = (i[:, None] - i[None, :]).abs() > w  # True = blocked
        return m(x, x, x, attn_mask=mask, need_weights=False)[0]

    b, t = s["batch"], s["T"]
    return Pair(spec, _Call(mha, fn), lambda small: (_seq(small, b, t, d),),
                f"window attention (T={t}, window {w}, d={d}, heads {s['heads']}, B={b})",
                "no-grad forward: FlexAttention block mask (rule flex_window); training step: SDPA with the band")


@workload("graph-attn", "graph-masked attention (block mask from a random graph) vs nn.MultiheadAttention (from_torch)",
          sizes={"batch": 8, "T": 256, "d": 256, "heads": 8, "degree": 8},
          quick={"batch": 2, "T": 16, "d": 32, "heads": 4, "degree": 3})
def graph_attn(s):
    torch.manual_seed(0)
    d = s["d"]
    mha = nn.MultiheadAttention(d, s["heads"], batch_first=True)

    def mask(t, g):  # True = blocked; each token attends to itself and ~degree random neighbours (symmetric)
        a = torch.rand(t, t, generator=g) < s["degree"] / t
        a = a | a.T | torch.eye(t, dtype=torch.bool)
        return ~a

    x, m = torch.randn(2, 4, d), mask(4, _gen(2))
    spec = _converted(mha, (x, x, x), {"attn_mask": m, "need_weights": False})
    hand = _Call(mha, lambda m_, q, k, v, am: m_(q, k, v, attn_mask=am, need_weights=False)[0])
    b, t = s["batch"], s["T"]

    def inputs(small):
        n = 8 if small else t
        x = torch.randn(2 if small else b, n, d, generator=_gen())
        return x, x, x, mask(n, _gen(2))

    return Pair(spec, hand, inputs, f"graph-masked attention (T={t}, d={d}, ~{s['degree']} nbrs, B={b})")


# ------------------------------------------------------------------------------------------------ 8. build time
def deep_spec(layers: int, width: int = 8) -> str:
    """A ``layers``-deep perceptron/conv stack (alternating), for timing the compiler."""
    lines = [f"model deep(width = {width}) {{", "  input x: image[B, width, 16, 16]"]
    prev, xi = "x", "xi_attribute = grid_patch(size = 3, pad = 1)"
    for i in range(layers):
        kappa = "kappa = chebyshev(d = 2) " if i % 2 else ""
        lines.append(f"  l{i} = head({prev}) {{ {kappa}{xi} out = width post = [relu] }}")
        prev = f"l{i}"
    lines += [f"  f = flatten({prev})", "  y = head(f) { out = 10 }", "  return y", "}"]
    return "\n".join(lines)


@workload("build-100", "rpn2c.check and rpn2c.compile of a 100-layer spec (ms, no hand-written side)",
          sizes={"layers": 100, "repeats": 7}, quick={"layers": 100, "repeats": 3}, kind="build")
def build_100(s):
    return deep_spec(s["layers"])


# ------------------------------------------------------------------------------------------------ helpers
def sizes_for(w: Workload, quick: bool, overrides: dict | None = None) -> dict:
    """The workload's sizes (quick or full) with ``overrides`` applied to the keys it has."""
    s = dict(w.quick if quick else w.sizes)
    for k, v in (overrides or {}).items():
        if k in s:
            s[k] = v
    return s


def check_equal(pair: Pair, tol: float = 1e-8) -> float:
    """Max abs difference of spec and hand-written outputs in float64 on the small input; raises if > ``tol``
    (relative to the output scale)."""
    spec, hand = copy.deepcopy(pair.spec).double().eval(), copy.deepcopy(pair.hand).double().eval()
    ins = tuple(i.double() if i.is_floating_point() else i for i in pair.inputs(True))
    with torch.no_grad():
        want, got = hand(*ins), spec(*ins)
    err = (got - want).abs().max().item()
    scale = max(1.0, want.abs().max().item())
    if not math.isfinite(err) or err > tol * scale:
        raise AssertionError(f"{pair.title}: rpn2c and hand-written differ by {err:.3g} (float64)")
    return err
