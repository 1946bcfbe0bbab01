"""from_torch's contract beyond equality: unsupported modules/options raise a located error naming the module path,
class and option (never a wrong answer); the weight links are exact adjoints; the import has no side effects; the
generated text is a valid, commented spec; the registration hook works for user classes."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from unification_helpers import rand

import rpn2c
from rpn2c.frontends import TorchImportError

try:
    from torch_geometric.nn import GCNConv
except ImportError:  # pragma: no cover
    GCNConv = None


class _Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) + 2  # adding a constant has no spec form (scaling by one does: scale)


def _seq(*layers):
    return nn.Sequential(*layers)


CASES = [
    # (id, module, positional inputs, keyword inputs, module path, class substring, option substring)
    ("avgpool-divisor", nn.AvgPool2d(2, divisor_override=3), (rand(1, 1, 4, 4),), {}, "", "AvgPool2d",
     "divisor_override=3"),
    ("maxpool-indices", nn.MaxPool1d(2, return_indices=True), (rand(1, 1, 4),), {}, "", "MaxPool1d",
     "return_indices=True"),
    ("mha-bias-kv", nn.MultiheadAttention(4, 2, add_bias_kv=True, batch_first=True), (rand(1, 3, 4),) * 3, {}, "",
     "MultiheadAttention", "add_bias_kv=True"),
    ("mha-zero-attn", nn.MultiheadAttention(4, 2, add_zero_attn=True, batch_first=True), (rand(1, 3, 4),) * 3, {},
     "", "MultiheadAttention", "add_zero_attn=True"),
    ("mha-per-head-mask", nn.MultiheadAttention(4, 2, batch_first=True), (rand(1, 3, 4),) * 3,
     {"attn_mask": torch.zeros(2, 3, 3, dtype=torch.float64)}, "", "MultiheadAttention", "attn_mask of shape"),
    ("mha-unbatched", nn.MultiheadAttention(4, 2), (rand(3, 4),) * 3, {}, "", "MultiheadAttention", "unbatched"),
    ("lstm-proj", nn.LSTM(3, 4, proj_size=2, batch_first=True), (rand(1, 2, 3),), {}, "", "LSTM", "proj_size=2"),
    ("rnn-unbatched", nn.RNN(3, 4), (rand(5, 3),), {}, "", "RNN", "unbatched"),
    ("transpose-conv", _seq(nn.ConvTranspose2d(1, 1, 2)), (rand(1, 1, 3, 3),), {}, "0", "ConvTranspose2d",
     "no RPN 2 converter"),
    ("prelu-items", _seq(nn.Linear(3, 4), nn.PReLU(4)), (rand(2, 4, 3),), {}, "1", "PReLU", "num_parameters=4"),
    ("glu-across-items", _seq(nn.Linear(3, 4), nn.GLU(dim=1)), (rand(1, 4, 3),), {}, "1", "GLU", "dim=1"),
    ("softmax-items-axis", _seq(nn.Linear(3, 3), nn.Softmax(dim=1)), (rand(2, 4, 3),), {}, "1", "Softmax", "dim=1"),
    ("softmax-no-dim", _seq(nn.Softmax()), (rand(2, 3),), {}, "0", "Softmax", "dim=None"),
    ("custom-forward-constant", _seq(nn.Linear(3, 3), _Custom()), (rand(1, 3),), {}, "1", "_Custom",
     "fx node 'add' (operator.add)"),
    ("linear-on-image", _seq(nn.Conv2d(1, 2, 1), nn.Linear(3, 2)), (rand(1, 1, 3, 3),), {}, "1", "Linear",
     "last axis"),
    ("layernorm-2d-on-sequence", _seq(nn.Linear(3, 3), nn.LayerNorm([4, 3])), (rand(2, 4, 3),), {}, "1",
     "LayerNorm", "normalized_shape=[4, 3]"),
    ("batchnorm-batch-stats", _seq(nn.BatchNorm1d(3, track_running_stats=False)), (rand(2, 3),), {}, "0",
     "BatchNorm1d", "track_running_stats=False"),
    ("batchnorm-cma", _seq(nn.BatchNorm1d(3, momentum=None)), (rand(2, 3),), {}, "0", "BatchNorm1d",
     "momentum=None"),
    ("batchnorm1d-on-sequence", _seq(nn.Linear(3, 4), nn.BatchNorm1d(4)), (rand(2, 4, 3),), {}, "1",
     "BatchNorm1d", "axis 1"),
    ("flatten-dims", _seq(nn.Flatten(0)), (rand(2, 3),), {}, "0", "Flatten", "start_dim=0"),
    ("dropout2d", _seq(nn.Conv2d(1, 1, 1), nn.Dropout2d(0.1)), (rand(1, 1, 2, 2),), {}, "1", "Dropout2d",
     "converter"),
    ("encoder-no-bias", nn.TransformerEncoderLayer(4, 2, 8, bias=False, batch_first=True), (rand(1, 3, 4),), {}, "",
     "TransformerEncoderLayer", "bias=False"),
    ("encoder-activation", nn.TransformerEncoderLayer(4, 2, 8, activation=torch.tanh, batch_first=True),
     (rand(1, 3, 4),), {}, "", "TransformerEncoderLayer", "activation=tanh"),
    ("nested-path", _seq(nn.Linear(3, 3), _seq(nn.ReLU(), nn.Softmin(0))), (rand(1, 3),), {}, "1.1", "Softmin",
     "dim=0"),
]
if GCNConv is not None:
    _edges = torch.tensor([[0, 1], [1, 2]])
    CASES += [
        ("gcn-improved", GCNConv(2, 3, improved=True), (rand(3, 2), _edges), {}, "", "GCNConv", "improved=True"),
        ("gcn-cached", GCNConv(2, 3, cached=True), (rand(3, 2), _edges), {}, "", "GCNConv", "cached=True"),
    ]


@pytest.mark.parametrize("module, args, kwargs, path, cls, option", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_unsupported_modules_and_options_raise(module, args, kwargs, path, cls, option):
    """Each unsupported module or option raises TorchImportError (a SpecTypeError, E0390) naming path, class and
    option -- never a silently different spec."""
    module = module.double()
    with pytest.raises(TorchImportError) as info:
        rpn2c.from_torch(module, args, kwargs)
    err = info.value
    assert isinstance(err, rpn2c.SpecTypeError) and err.codes == ["E0390"]
    assert err.module_path == path and cls in err.module_class
    message = str(err)
    assert f"module '{path or '<root>'}'" in message and cls in message and option in message, message


def test_links_are_exact_adjoints():
    """<apply(T), G> = <T, scatter(G)> for every link (per-head row slices, transposes, reshapes), so mapped
    gradients are exactly the torch-side gradients."""
    m = nn.MultiheadAttention(6, 3, batch_first=True).double()
    spec = rpn2c.from_torch(m, (rand(1, 2, 6),) * 3)
    tensors = dict(m.named_parameters())
    for name, link in spec.links.items():
        t = torch.randn(tensors[link.source].shape, dtype=torch.float64)
        g = torch.randn(spec.state_dict[name].shape, dtype=torch.float64)
        torch.testing.assert_close((link.apply(t) * g).sum(), (t * link.scatter(g, t.shape)).sum())
    # the slices of one packed tensor tile it exactly once
    ones = spec.to_torch({n: torch.ones_like(v) for n, v in spec.state_dict.items()})
    for name, t in ones.items():
        torch.testing.assert_close(t, torch.ones_like(t), msg=name)


def test_import_has_no_side_effects():
    """from_torch runs the module once in eval mode without gradients: training flags, BatchNorm running statistics
    and parameters are unchanged."""
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5), nn.Linear(4, 2)).double().train()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    spec = rpn2c.from_torch(m, (rand(5, 3),))
    assert all(mod.training for mod in m.modules())
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert set(spec.state_dict) >= {"fc0.post.0.bn.running_mean", "fc0.post.0.bn.num_batches_tracked"}


def test_generated_text_is_a_checked_commented_spec():
    """The text parses and checks, names each torch module in a comment, and its parameter count is torch's."""
    m = nn.Sequential(nn.Conv1d(2, 3, 3, padding=1), nn.ReLU(), nn.AvgPool1d(2), nn.Flatten(), nn.Linear(6, 2))
    spec = rpn2c.from_torch(m.double(), (rand(2, 2, 4),))
    graph = rpn2c.check(spec.text)
    assert graph.param_count == sum(p.numel() for p in m.parameters())
    for marker in ("# [0] Conv1d", "# [1] ReLU", "# [2] AvgPool1d", "# [3] Flatten", "# [4] Linear",
                   "ξ_attribute = grid_patch", "κ = patch_mean", "ψ = eye", "π zero"):
        assert marker in spec.text, marker
    assert spec.input_names == ["x"]


def test_register_converter_rejects_non_modules_and_converters_must_return_values():
    with pytest.raises(TypeError):
        rpn2c.frontends.register_converter(int, lambda m, ctx: None)

    class Odd(nn.Module):
        def forward(self, x):
            return x

    rpn2c.frontends.register_converter(Odd, lambda m, ctx: None)
    with pytest.raises(TypeError, match="returned NoneType"):
        rpn2c.from_torch(nn.Sequential(nn.Linear(2, 2), Odd()).double(), (rand(1, 2),))


def test_subclass_overriding_forward_is_not_converted_as_its_base():
    class Scaled(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 3

    # traced (F.linear on its own weights, then scale(by = 3)), not converted as nn.Linear
    module = Scaled(2, 2).double()
    spec = rpn2c.from_torch(module, (rand(1, 2),))
    assert "scale(by = 3.0)" in spec.text
    x = rand(4, 2)
    torch.testing.assert_close(spec.compile()(x), module(x))


@pytest.mark.parametrize("module, args", [
    (nn.Sequential(nn.Conv2d(1, 2, 3, padding="same", padding_mode="circular"), nn.BatchNorm2d(2), nn.ReLU(),
                   nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 3), nn.LogSoftmax(-1)), (rand(2, 1, 4, 4),)),
    (nn.TransformerEncoderLayer(4, 2, 6, norm_first=True), (rand(3, 2, 4),)),
    (nn.LSTM(2, 3, num_layers=2, bidirectional=True, batch_first=True), (rand(2, 4, 2),)),
    (nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True),
     (rand(1, 2, 4), rand(1, 3, 3), rand(1, 3, 5), torch.tensor([[False, True, False]]))),
], ids=["cnn", "encoder", "lstm", "mha"])
def test_generated_text_is_canonical(module, args):
    """The text is already in `rpn2c fmt` canonical form (comments kept), so it can be checked in as is."""
    from rpn2c.syntax.format import format_program
    from rpn2c.syntax.parser import parse

    text = rpn2c.from_torch(module.double(), args).text
    assert format_program(parse(text)) == text
