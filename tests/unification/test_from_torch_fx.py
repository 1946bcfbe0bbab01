"""from_torch on whole models: a module with its own ``forward`` is traced with torch.fx and converted node by node.

Residual adds (``relu(b(relu(a(x))) + x)``), concatenation, elementwise products, functional calls (``F.relu``,
``torch.flatten``, ``F.adaptive_avg_pool2d``, ``x.mean(dims)``), tuple outputs of recurrent leaves
(``out, h = self.gru(x)``) and the leaves themselves (converted by the existing converters, weights linked as in a
Sequential) must equal torch in float64: outputs and mapped parameter gradients, both lowerings.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import assert_matches_torch, n_examples, rand

import rpn2c
from rpn2c.components.registry import lookup
from rpn2c.frontends.fx_import import FxImportError
from rpn2c.frontends.torch_import import TorchImportError


def _randomise_bn(module: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BatchNorm affine weights and running statistics (the defaults 1/0 would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g))
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return module


# ------------------------------------------------------------------------------------------------ ResNet
class BasicBlock(nn.Module):
    """torchvision's basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, widths=(4, 8), strides=(1, 2), classes=5, pool="module"):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        blocks, cin = [], widths[0]
        for w, s in zip(widths, strides):
            blocks += [BasicBlock(cin, w, s), BasicBlock(w, w)]
            cin = w
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)
        self.pool = pool

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        if self.pool == "module":
            x = torch.flatten(self.avgpool(x), 1)
        elif self.pool == "functional":
            x = F.adaptive_avg_pool2d(x, 1).view(x.size(0), -1)
        else:
            x = x.mean((2, 3))
        return self.fc(x)


def test_resnet_with_identity_and_downsampling_shortcuts():
    spec = assert_matches_torch(_randomise_bn(ResNet()), (rand(2, 3, 6, 6),))
    text = spec.text
    assert text.count(" = add(") == 4, text  # one residual add per block
    assert "layers_2_downsample_0 = head(layers_1_relu)" in text and "pool_items" not in text


@settings(max_examples=n_examples(4), deadline=None)
@given(widths=st.sampled_from([(2,), (2, 3), (3, 3)]), stride=st.sampled_from([1, 2]),
       pool=st.sampled_from(["module", "functional", "mean"]), seed=st.integers(0, 3))
def test_resnet_family_matches_torch(widths, stride, pool, seed):
    torch.manual_seed(seed)
    model = _randomise_bn(ResNet(widths, (stride,) * len(widths), 3, pool), seed)
    assert_matches_torch(model, (rand(2, 3, 4, 4, seed=seed),), references=(False,) if seed % 2 else (False, True))


# ------------------------------------------------------------------------------------------------ Transformer
@pytest.mark.parametrize("norm_first, final_norm, batch_first, causal", [
    (False, True, True, False), (True, False, True, True), (False, False, False, False)])
def test_transformer_encoder_stack(norm_first, final_norm, batch_first, causal):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, norm_first=norm_first, batch_first=batch_first)
    enc = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(8) if final_norm else None,
                                enable_nested_tensor=False)
    x = rand(2, 5, 8) if batch_first else rand(5, 2, 8)
    kwargs = {"mask": nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)} if causal else {}
    spec = assert_matches_torch(enc, (x,), kwargs)
    assert spec.text.count("    heads = 2\n") == 3
    assert ("attn_mask = mask" in spec.text) == causal


class Classifier(nn.Module):
    """An encoder inside a model: embedding projection, 2-layer encoder with a padding mask, mean over tokens."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 8)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True), 2)
        self.head = nn.Linear(8, 4)

    def forward(self, x, pad):
        h = self.encoder(self.proj(x), src_key_padding_mask=pad)
        return self.head(h.mean(1))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_transformer_encoder_in_a_model_with_padding_mask_and_fast_path_note():
    """The spec is torch's math path (what gradients see); the no-grad fast path with nested tensors differs only at
    padded positions, where it returns 0 (the spec says so in a note)."""
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    x = rand(2, 5, 3)
    spec = assert_matches_torch(Classifier(), (x, pad))
    assert "nested-tensor fast path" in spec.text and "key_padding" in spec.text
    m = Classifier().double().eval()
    h = m.proj(x)
    with torch.no_grad():
        fast = m.encoder(h, src_key_padding_mask=pad)
    math = m.encoder(h, src_key_padding_mask=pad)
    assert (fast[pad] == 0).all() and (math[pad] != 0).all()
    torch.testing.assert_close(fast[~pad], math[~pad].detach())


# ------------------------------------------------------------------------------------------------ recurrent
class GRUClassifier(nn.Module):
    def __init__(self, read="last", batch_first=True):
        super().__init__()
        cell = nn.LSTM if read == "lstm" else nn.GRU
        self.rnn = cell(3, 6, num_layers=2, batch_first=batch_first)
        self.fc = nn.Linear(6, 4)
        self.read, self.batch_first = read, batch_first

    def forward(self, x):
        if self.read == "lstm":
            _, (h, c) = self.rnn(x)
            return self.fc(h[-1])
        out, h = self.rnn(x)
        if self.read == "mean":
            return self.fc(out.mean(1 if self.batch_first else 0))
        if self.read == "h_n":
            return self.fc(h[-1])
        if self.read == "slice":
            return self.fc((out[:, 1:-1] if self.batch_first else out[1:-1]).mean(1 if self.batch_first else 0))
        return self.fc(out[:, -1] if self.batch_first else out[-1])


needs_sequence_ops = pytest.mark.skipif(lookup("last", ("op",)) is None, reason="the sequence readout ops "
                                        "(last, first, slice) are not in the registry")


@needs_sequence_ops
@pytest.mark.parametrize("read, batch_first", [("last", True), ("last", False), ("h_n", True), ("slice", True),
                                               ("slice", False), ("lstm", False)])
def test_gru_classifier_on_the_last_time_step(read, batch_first):
    """``out[:, -1]`` / ``out[-1]`` / ``h_n[-1]`` = last, ``out[:, 1:-1]`` = slice; unread outputs (``h_n``,
    an LSTM's ``c_n``) emit nothing."""
    x = rand(2, 5, 3) if batch_first else rand(5, 2, 3)
    spec = assert_matches_torch(GRUClassifier(read, batch_first), (x,))
    assert ("slice(rnn, start = 1, stop = -1)" if read == "slice" else " = last(rnn)") in spec.text


class TokenClassifier(nn.Module):
    """Token ids -> embedding -> encoder -> the first token's vector (a CLS readout) -> linear; ``distilled``: the
    mean of that and a second linear on the second token (DeiT's distillation token ``x[:, 1]``)."""

    def __init__(self, distilled=False):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.fc = nn.Linear(8, 3)
        self.dist = nn.Linear(8, 3) if distilled else None

    def forward(self, ids):
        h = self.encoder(self.emb(ids))
        return self.fc(h[:, 0]) if self.dist is None else (self.fc(h[:, 0]) + self.dist(h[:, 1])) / 2


@needs_sequence_ops
@pytest.mark.skipif(lookup("embedding", ("op",)) is None, reason="the embedding op is not in the registry")
@pytest.mark.parametrize("distilled", [False, True])
def test_token_classifier_with_a_first_token_readout(distilled):
    spec = assert_matches_torch(TokenClassifier(distilled), (torch.tensor([[1, 4, 10, 0], [3, 3, 7, 2]]),))
    assert "tokens[B, T]" in spec.text and " = first(" in spec.text
    assert (", index = 1)" in spec.text and " = item(" in spec.text) == distilled


@pytest.mark.parametrize("batch_first", [True, False])
def test_gru_classifier_on_the_mean_over_time(batch_first):
    x = rand(2, 5, 3) if batch_first else rand(5, 2, 3)
    spec = assert_matches_torch(GRUClassifier("mean", batch_first), (x,))
    assert 'pool_items(rnn, how = "mean")' in spec.text


class JumpingGCN(nn.Module):
    """Two GCNConv leaves (torch_geometric) and a jumping-knowledge concatenation of both layers' outputs."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv1, self.conv2 = GCNConv(3, 4), GCNConv(4, 2)

    def forward(self, x, edge_index):
        h = F.relu(self.conv1(x, edge_index))
        return torch.cat([h, self.conv2(h, edge_index)], dim=-1)


def test_gcn_leaves_with_a_jumping_knowledge_cat():
    pytest.importorskip("torch_geometric")
    edges = torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 3]])
    spec = assert_matches_torch(JumpingGCN(), (rand(4, 3), edges))
    assert spec.text.count('xi_instance = graph(edges = edge_index, norm = "symmetric"') == 2


# ------------------------------------------------------------------------------------------------ MLP, cat, ⊙
class SkipMLP(nn.Module):
    """x + W2 gelu(W1 x), layer-normed, a gated (⊙) branch, F.layer_norm, then a log-softmax head (F.* and Tensor
    methods mixed)."""

    def __init__(self, d=5):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 7), nn.Linear(7, d)
        self.norm = nn.LayerNorm(d)
        self.gate, self.value = nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, 2)

    def forward(self, x):
        h = self.norm(x + self.fc2(F.gelu(self.fc1(x))))
        h = h + torch.sigmoid(self.gate(h)) * self.value(h).tanh()
        h = F.layer_norm(h, h.shape[-1:], eps=1e-3)
        return F.log_softmax(self.out(h).relu(), dim=-1)


class CatNet(nn.Module):
    """Two branches joined by torch.cat: on images (channels) and on vectors (features); an input read twice."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(2, 3, 3, padding=1)
        self.b = nn.Conv2d(2, 4, 1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(7 * 2 * 2, 3)
        self.side = nn.Linear(4, 3)

    def forward(self, img, v):
        y = torch.cat([F.relu(self.a(img)), self.b(img)], dim=1)
        y = self.fc(self.pool(y).flatten(1))
        return torch.cat((y, self.side(v), v), -1)


@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 5)])
def test_mlp_with_skip_and_gating(shape):
    spec = assert_matches_torch(SkipMLP(), (rand(*shape),))
    assert " = add(x, fc2)" in spec.text and " = mul(" in spec.text
    assert "post = [gelu]" in spec.text  # F.gelu folds into the head before it


def test_cat_of_branches():
    spec = assert_matches_torch(CatNet(), (rand(2, 2, 4, 4), rand(2, 4)))
    assert spec.input_names == ["img", "v"] and spec.text.count(" = concat(") == 2


def test_traced_module_inside_a_sequential():
    block = BasicBlock(2, 2)
    net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), _randomise_bn(block), nn.Flatten(), nn.Linear(2 * 9, 3))
    assert_matches_torch(net, (rand(2, 1, 3, 3),))


class Fn(nn.Module):
    """``fn(self, x)`` with the given submodules and parameters as attributes (fx traces through ``fn``)."""

    def __init__(self, fn, **attributes):
        super().__init__()
        self.fn = fn
        for name, value in attributes.items():
            setattr(self, name, value)

    def forward(self, x):
        return self.fn(self, x)


def test_shared_module_called_twice_sums_gradients():
    twice = Fn(lambda m, x: m.fc(torch.tanh(m.fc(x))), fc=nn.Linear(3, 3))
    spec = assert_matches_torch(twice, (rand(2, 3),))
    assert sorted({link.source for link in spec.links.values()}) == ["fc.bias", "fc.weight"]


def _pre_and_post(m, x):
    a = m.fc(x)
    return a + F.relu(a)


def test_processing_is_not_folded_into_a_head_that_is_read_twice():
    spec = assert_matches_torch(Fn(_pre_and_post, fc=nn.Linear(3, 3)), (rand(4, 3),))
    assert "post = [" not in spec.text


# ------------------------------------------------------------------------------------------------ errors
class _Branchy(nn.Module):
    def forward(self, x):
        return x.relu() if x.sum() > 0 else x


def _h_n(m, x):
    _, h = m.gru(x)
    return h[-1]


def _in_place(m, x):
    y = m.fc(x)
    return y + F.relu(y, inplace=True)


_INNER = Fn(lambda m, x: x @ m.fc.weight, fc=nn.Linear(3, 3))

ERRORS = [
    ("constant", Fn(lambda m, x: m.fc(x) + 2, fc=nn.Linear(3, 3)), (rand(2, 3),), "", "operator.add", "a constant"),
    ("parameter-in-forward", Fn(lambda m, x: x * m.w, w=nn.Parameter(torch.ones(2, 3))), (rand(2, 3),), "",
     "operator.mul", "'w' has 2 rows on the sample axis"),
    ("broadcast", Fn(lambda m, x: x + m.fc(x), fc=nn.Linear(3, 1)), (rand(2, 3),), "", "operator.add",
     "one type and shape"),
    ("bidirectional-h_n", Fn(_h_n, gru=nn.GRU(3, 4, bidirectional=True, batch_first=True)), (rand(2, 4, 3),), "",
     "operator.getitem", "unidirectional"),
    ("transpose-batch-and-time", Fn(lambda m, x: x.transpose(0, 1).relu()), (rand(2, 4, 3),), "",
     "Tensor.transpose", "only swapping the last two axes"),
    ("cat-batch-axis", Fn(lambda m, x: torch.cat([x, m.fc(x)], dim=0), fc=nn.Linear(3, 3)), (rand(2, 4, 3),), "",
     "torch.cat", "dim=0"),
    ("in-place", Fn(_in_place, fc=nn.Linear(3, 3)), (rand(2, 3),), "", "torch.nn.functional.relu", "in place"),
    ("nested-path", Fn(lambda m, x: m.blocks(x), blocks=nn.Sequential(nn.Linear(3, 3), _INNER)), (rand(2, 3),),
     "blocks.1", "operator.matmul", "reads 'blocks.1.fc.weight' directly in forward"),
]


@pytest.mark.parametrize("module, args, path, op, why", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_unsupported_nodes_raise_located_errors(module, args, path, op, why):
    """Each unsupported node raises FxImportError (E0390) naming the enclosing module, the fx node and its op."""
    with pytest.raises(FxImportError) as info:
        rpn2c.from_torch(module.double(), args)
    err = info.value
    assert isinstance(err, rpn2c.SpecTypeError) and err.codes == ["E0390"]
    assert err.module_path == path and err.op == op, (err.module_path, err.op)
    message = str(err)
    assert f"fx node '{err.node}'" in message and op in message and why in message, message
    assert f"<torch:{path or 'root'}:{err.node}>" in message


def test_data_dependent_control_flow_is_a_located_error():
    """A branch on a traced tensor's values is refused at the line that branches (the trace would bake the example's
    data into the model); branches on sizes, ranks and dtypes follow the example."""
    with pytest.raises(TorchImportError, match="a Python branch on the values") as info:
        rpn2c.from_torch(_Branchy().double(), (rand(2, 3),))
    assert info.value.codes == ["E0390"] and "_Branchy" in info.value.module_class
    assert info.value.library_file == __file__
    assert info.value.library_line == _Branchy.forward.__code__.co_firstlineno + 1


# ------------------------------------------------------------------------------------------------ broadcasting
class SqueezeExcite(nn.Module):
    """y = x ⊙ σ(W₂ relu(W₁ mean(x))) viewed [B, C, 1, 1], plus a FiLM-style shift on a sequence branch."""

    def __init__(self, c=4, lift="view"):
        super().__init__()
        self.conv = nn.Conv2d(2, c, 3, padding=1)
        self.fc1, self.fc2 = nn.Linear(c, 2), nn.Linear(2, c)
        self.lift = lift

    def forward(self, x):
        x = self.conv(x)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean((2, 3))))))
        if self.lift == "view":
            s = s.view(s.size(0), s.size(1), 1, 1)
        elif self.lift == "index":
            s = s[:, :, None, None]
        else:
            s = s.unsqueeze(-1).unsqueeze(-1)
        return x * s - s


class FiLM(nn.Module):
    def __init__(self, batch_first=True):
        super().__init__()
        self.gamma, self.beta, self.fc = nn.Linear(2, 3), nn.Linear(2, 3), nn.Linear(3, 3)
        self.axis = 1 if batch_first else 0

    def forward(self, x, z):
        return self.gamma(z).unsqueeze(self.axis) * self.fc(x) + self.beta(z).unsqueeze(self.axis)


@pytest.mark.parametrize("lift", ["view", "index", "unsqueeze"])
def test_squeeze_excitation_broadcasts_a_per_sample_vector(lift):
    spec = assert_matches_torch(SqueezeExcite(lift=lift), (rand(2, 2, 3, 3),))
    assert " = mul(conv, " in spec.text and " = sub(" in spec.text


@pytest.mark.parametrize("batch_first", [True, False])
def test_film_on_a_sequence(batch_first):
    x = rand(2, 4, 3) if batch_first else rand(4, 2, 3)
    assert_matches_torch(FiLM(batch_first), (x, rand(2, 2)))


@pytest.mark.parametrize("module, args, marker", [
    (ResNet((2, 3), (1, 2), 3), (rand(2, 3, 4, 4),), "# [layers.0:add] operator.add -> add"),
    (CatNet(), (rand(2, 2, 4, 4), rand(2, 4)), "# [root:cat] torch.cat(dim=1) -> concat"),
    (SqueezeExcite(), (rand(2, 2, 3, 3),), "# [root:mul] operator.mul -> mul"),
    (GRUClassifier("mean", False), (rand(5, 2, 3),), "# [root:mean] Tensor.mean(dim=0) -> pool_items"),
], ids=["resnet", "cat", "squeeze-excite", "gru"])
def test_traced_text_is_a_checked_canonical_commented_spec(module, args, marker):
    """The text checks, keeps torch's parameter count, names the fx nodes it converts, and is `rpn2c fmt` output."""
    from rpn2c.syntax.format import format_program
    from rpn2c.syntax.parser import parse

    module = module.double()
    text = rpn2c.from_torch(module, args).text
    assert format_program(parse(text)) == text
    assert rpn2c.check(text).param_count == sum(p.numel() for p in module.parameters())
    assert marker in text, text
