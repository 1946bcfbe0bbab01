"""Token embeddings, positional encodings and item-axis readouts against hand-written torch (float64, both
lowerings, outputs and gradients), their shape rules over symbolic T, and the located errors for misuse."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import InputError
from rpn2c.components.sequence import slice_length
from rpn2c.frontends import TorchImportError

def _spec(*lines: str, input_type: str = "tokens[B, T]") -> str:
    return "model m {\n  input x: " + input_type + "\n" + "".join(f"  {ln}\n" for ln in lines) + "  return y\n}\n"


def _pair(text: str):
    """The default and the reference lowering of ``text`` in float64, with the same weights."""
    torch.manual_seed(0)
    fast = rpn2c.compile(text).double()
    ref = rpn2c.compile(text, reference=True).double()
    ref.load_state_dict(fast.state_dict())
    return fast, ref


def _agree_with(text: str, x: torch.Tensor, expected):
    """Both lowerings equal ``expected(model, x)`` (torch on the model's own weights): outputs, and gradients
    with respect to every parameter and the input."""
    for model in _pair(text):
        x = x.detach().requires_grad_()
        wrt = [x, *model.parameters()]
        y, want = model(x), expected(model, x)
        assert_close(y, want, rtol=1e-12, atol=1e-12)
        w = torch.randn_like(y)
        got = torch.autograd.grad((y * w).sum(), wrt, allow_unused=True, materialize_grads=True)
        ref = torch.autograd.grad((want * w).sum(), wrt, allow_unused=True, materialize_grads=True)
        for g, r in zip(got, ref):
            assert_close(g, r)


# ------------------------------------------------------------------------------------------------ embedding
@given(b=st.integers(1, 3), t=st.integers(1, 6), vocab=st.integers(1, 9), d=st.integers(1, 5),
       pad=st.one_of(st.none(), st.integers(-9, 8)), seed=st.integers(0, 2**16))
def test_embedding_equals_nn_embedding(b, t, vocab, d, pad, seed):
    if pad is not None and not -vocab <= pad < vocab:
        pad = None
    kwargs = f"vocab = {vocab}, dim = {d}" + ("" if pad is None else f", padding_idx = {pad}")
    text = _spec(f"y = embedding(x, {kwargs})")
    x = torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))
    for model in _pair(text):
        assert sum(p.numel() for p in model.parameters()) == rpn2c.check(text).param_count == vocab * d
        ref = nn.Embedding(vocab, d, padding_idx=pad).double()
        ref.weight.data.copy_(model.y.weight.data)
        assert_close(model(x), ref(x), rtol=0, atol=0)
        w = torch.randn(b, t, d, dtype=torch.float64)
        (model(x) * w).sum().backward()
        (ref(x) * w).sum().backward()
        assert_close(model.y.weight.grad, ref.weight.grad)
        if pad is not None:  # nn.Embedding's padding row: zero at initialisation and never updated
            assert model.y.weight.grad[pad].abs().max() == 0
            assert rpn2c.compile(text).y.weight[pad].abs().max() == 0
        # the RPN 2 reading: κ = one-hot, ψ = Wᵀ
        assert_close(model(x), F.one_hot(x, vocab).double() @ model.y.weight)


def test_embedding_rejects_out_of_range_and_float_ids():
    model = rpn2c.compile(_spec("y = embedding(x, vocab = 5, dim = 2)"))
    with pytest.raises(ValueError, match=r"token id 5 at index \(1, 2\) is out of range \[0, 5\)"):
        model(torch.tensor([[0, 1, 2], [3, 4, 5]]))
    with pytest.raises(ValueError, match=r"token id -1 at index \(0, 0\)"):
        model(torch.tensor([[-1, 1, 2]]))
    with pytest.raises(TypeError, match="reads integer token ids, got a torch.float32 tensor"):
        model(torch.zeros(2, 3))


def _reads(model, x) -> int:
    """The range check's reads of the ids in one forward (its ``aminmax``, then one host read of two values)."""
    from tests.op_count import count_ops

    return count_ops(lambda: model(x))["aminmax"]


def test_accelerator_ids_are_read_once_per_tensor_and_again_once_changed(monkeypatch):
    """On an accelerator the check's host read is a synchronisation: made once per input tensor, again after an
    in-place write (the version counter moves), for another tensor, and on every call for an inference tensor.
    CPU tensors stand in for an accelerator's here; the out-of-range error stays located."""
    from rpn2c.components.impl import sequence as impl
    from rpn2c.functional.checked import Checked

    monkeypatch.setattr(impl, "READ_EVERY_CALL", ("meta",))
    monkeypatch.setattr(impl, "_CHECKED", Checked())
    model = rpn2c.compile(_spec("y = embedding(x, vocab = 5, dim = 2)"))
    x = torch.tensor([[0, 1, 2], [3, 4, 4]])
    assert [_reads(model, x) for _ in range(3)] == [1, 0, 0]
    assert _reads(model, x.clone()) == 1  # another tensor, the same values
    x[1, 2] = 5
    with pytest.raises(InputError, match=r"token id 5 at index \(1, 2\) is out of range \[0, 5\)"):
        model(x)
    with pytest.raises(InputError, match=r"token id 5 at index \(1, 2\)"):
        model(x)  # a tensor that failed is not remembered
    with torch.inference_mode():
        y = torch.tensor([[0, 1, 2]])
        assert [_reads(model, y) for _ in range(2)] == [1, 1]
    assert [_reads(model, z) for z in (torch.tensor([[0, 1]]), torch.tensor([[0, 1]]))] == [1, 1]


def test_cpu_ids_are_read_on_every_call_even_when_their_buffer_is_refilled_behind_torch_s_back():
    """``torch.from_numpy`` shares the array's memory: a write through numpy moves no version counter, so only a
    check on every call catches it; on a CPU there is no synchronisation to save."""
    np = pytest.importorskip("numpy")
    model = rpn2c.compile(_spec("y = embedding(x, vocab = 5, dim = 2)"))
    ids = np.array([[0, 1, 2]])
    assert [_reads(model, torch.from_numpy(ids)) for _ in range(2)] == [1, 1]
    ids[0, 1] = 7
    with pytest.raises(InputError, match=r"token id 7 at index \(0, 1\)"):
        model(torch.from_numpy(ids))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_ids_are_read_once_per_tensor():
    """The check's host read (a synchronisation) once per CUDA tensor; a write in place is read again, located."""
    model = rpn2c.compile(_spec("y = embedding(x, vocab = 5, dim = 2)")).cuda()
    x = torch.tensor([[0, 1, 2], [3, 4, 4]], device="cuda")
    assert [_reads(model, x) for _ in range(3)] == [1, 0, 0]
    x[1, 0] = -1
    with pytest.raises(InputError, match=r"token id -1 at index \(1, 0\)"):
        model(x)


def test_one_sequence_without_a_batch_axis():
    text = _spec("e = embedding(x, vocab = 7, dim = 3)", "y = last(e)", input_type="tokens[T]")
    graph = rpn2c.check(text)
    assert str(graph.node("x").type) == "tokens[T]" and str(graph.node("e").type) == "sequence[T, 3]"
    model = rpn2c.compile(text).double()
    x = torch.tensor([3, 1, 6, 2])
    assert_close(model(x), model.e.weight[2].unsqueeze(0))


# ------------------------------------------------------------------------------------------------ positions
def _paper_table(n: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """The Transformer paper's §3.5 table, element by element."""
    return torch.tensor([[math.sin(t / base ** (i / d)) if i % 2 == 0 else math.cos(t / base ** ((i - 1) / d))
                          for i in range(d)] for t in range(n)], dtype=torch.float64)


@given(b=st.integers(1, 3), t=st.integers(1, 9), d=st.integers(1, 7), symbolic=st.booleans(),
       base=st.sampled_from([10000.0, 100.0]))
def test_sinusoidal_position_adds_the_papers_table(b, t, d, symbolic, base):
    text = _spec(f"y = sinusoidal_position(x, base = {base})",
                 input_type=f"sequence[B, {'T' if symbolic else t}, {d}]")
    x = torch.randn(b, t, d, dtype=torch.float64, requires_grad=True)
    for model in _pair(text):
        assert list(model.parameters()) == [] and model.state_dict() == {}  # a buffer, not saved
        y = model(x)
        assert_close(y, x + _paper_table(t, d, base), rtol=1e-12, atol=1e-12)
        (g,) = torch.autograd.grad(y.sum(), x)
        assert_close(g, torch.ones_like(x))


def test_sinusoidal_position_beyond_its_cached_rows():
    model = rpn2c.compile(_spec("y = sinusoidal_position(x)", input_type="sequence[B, T, 4]")).double()
    x = torch.zeros(1, 600, 4, dtype=torch.float64)
    assert_close(model(x)[0], _paper_table(600, 4))


@given(b=st.integers(1, 3), t=st.integers(1, 8), d=st.integers(1, 5), extra=st.integers(0, 3))
def test_learned_position_adds_the_first_t_rows(b, t, d, extra):
    text = _spec(f"y = learned_position(x, max_len = {t + extra})", input_type=f"sequence[B, T, {d}]")
    assert rpn2c.check(text).param_count == (t + extra) * d
    x = torch.randn(b, t, d, dtype=torch.float64)
    _agree_with(text, x, lambda m, x: x + m.y.weight[:t])


def test_learned_position_refuses_a_longer_sequence_at_run_time():
    """A clear refusal of the input (``InputError``, as the fuzz harness counts it), not a crash: found by fuzzing
    a varied gpt2.rpn whose learned positions were fewer than the items fed."""
    model = rpn2c.compile(_spec("y = learned_position(x, max_len = 4)", input_type="sequence[B, T, 2]"))
    model(torch.randn(2, 4, 2))
    with pytest.raises(InputError, match=r"learned_position\(max_len = 4\) got a sequence of 5 items"):
        model(torch.randn(2, 5, 2))


def test_prepend_token_puts_a_learned_item_first():
    text = _spec("y = prepend_token(x)", input_type="sequence[B, T, 3]")
    graph = rpn2c.check(text)
    assert str(graph.node("y").type) == "sequence[B, T+1, 3]" and graph.param_count == 3
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    _agree_with(text, x, lambda m, x: torch.cat([m.y.token.expand(2, 1, 3), x], dim=1))


# ------------------------------------------------------------------------------------------------ readouts
@pytest.mark.parametrize("op, index", [("last", -1), ("first", 0)])
def test_last_and_first_read_one_item(op, index):
    text = _spec(f"y = {op}(x)", input_type="sequence[B, T, 3]")
    assert str(rpn2c.check(text).node("y").type) == "vector[B, 3]"
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    _agree_with(text, x, lambda m, x: x[:, index])


@given(t=st.integers(1, 8), start=st.integers(-9, 9), stop=st.one_of(st.none(), st.integers(-9, 9)),
       symbolic=st.booleans())
def test_slice_is_pythons_slice_with_strict_bounds(t, start, stop, symbolic):
    text = _spec(f"y = slice(x, start = {start}{'' if stop is None else f', stop = {stop}'})",
                 input_type=f"sequence[B, {'T' if symbolic else t}, 2]")
    x = torch.randn(3, t, 2, dtype=torch.float64)
    want = x[:, start:stop]
    in_bounds = (-t <= start < t) and (stop is None or -t <= stop <= t)
    try:
        graph = rpn2c.check(text)
    except rpn2c.SpecError as exc:
        assert exc.diagnostics[0].code == "E0403"
        assert symbolic or not in_bounds or want.shape[1] == 0
        return
    assert not symbolic and in_bounds and want.shape[1] > 0 or symbolic
    n = graph.node("y").type.items
    if isinstance(n, int):  # a known length is the slice's, whatever T is at run time
        assert n == want.shape[1] or not in_bounds
    else:
        assert n == "T" if (start, stop) == (0, None) else n.startswith("T")
    for model in _pair(text):
        if in_bounds and want.shape[1] > 0:
            assert_close(model(x), want)
        else:
            with pytest.raises(ValueError, match="needs at least"):
                model(x)


def test_slice_shapes_over_a_symbolic_item_count():
    cases = {(1, None): "T-1", (1, -1): "T-2", (-3, None): 3, (-3, -1): 2, (2, 5): 3, (0, None): "T"}
    for (start, stop), length in cases.items():
        assert slice_length("T", start, stop)[0] == length
    text = _spec("c = prepend_token(x)", "y = slice(c, start = 1, stop = -1)", input_type="sequence[B, T, 2]")
    assert str(rpn2c.check(text).node("y").type) == "sequence[B, T-1, 2]"


# ------------------------------------------------------------------------------------------------ misuse
@pytest.mark.parametrize("line, at, message", [
    ("y = relu(x)", (3, 12), "'relu' cannot read tokens[B, T]: token ids are integers"),
    ("y = add(x, x)", (3, 11), "'add' cannot read tokens[B, T]"),
    ("y = flatten(x)", (3, 15), "'flatten' cannot read tokens[B, T]"),
    ("y = head(x) { out = 2 }", (3, 7), "a head cannot read tokens[B, T]"),
    ("y = head(x) { pre = [layer_norm]  out = 2 }", (3, 7), "a head cannot read tokens[B, T]"),
    ("y = last(x)", (3, 12), "'last' cannot read tokens[B, T]"),
    ("y = recurrent(x) { cell = gru  out = 2 }", (3, 7), "got tokens[B, T]"),
    ("y = embedding(x, vocab = 3, dim = 2, padding_idx = 3)", (3, 7), "padding_idx = 3 is outside"),
])
def test_only_the_embedding_reads_tokens(line, at, message):
    with pytest.raises(rpn2c.SpecError) as exc:
        rpn2c.check(_spec(line), "m.rpn")
    d = exc.value.diagnostics[0]
    assert message in d.message and (d.span.file, d.span.line, d.span.col) == ("m.rpn", *at)
    assert d.code in ("E0402", "E0403")


@pytest.mark.parametrize("line, message", [
    ("y = embedding(x, vocab = 3, dim = 2)", "embedding reads integer token ids tokens[B, T], got sequence[B, 4, 3]"),
    ("y = learned_position(x, max_len = 3)", "max_len = 3 positions, but sequence[B, 4, 3] has 4 items"),
    ("y = slice(x, start = 2, stop = 2)", "keeps no item"),
    ("y = slice(x, start = 4)", "needs at least 5 items, the sequence has 4"),
    ("y = slice(x, stop = 5)", "needs at least 5 items"),
])
def test_sequence_shape_errors_are_located(line, message):
    with pytest.raises(rpn2c.SpecError) as exc:
        rpn2c.check(_spec(line, input_type="sequence[B, 4, 3]"), "m.rpn")
    d = exc.value.diagnostics[0]
    assert d.code == "E0403" and message in d.message and d.span.line == 3


def test_slice_from_both_ends_needs_a_known_length():
    with pytest.raises(rpn2c.SpecError, match="depends on the symbolic item count T"):
        rpn2c.check(_spec("y = slice(x, start = -2, stop = 3)", input_type="sequence[B, T, 3]"))


# ------------------------------------------------------------------------------------------------ layout ops
def _type(text: str, name: str = "y") -> str:
    return str(rpn2c.check(text).node(name).type)


def test_to_signal_and_to_items_swap_the_instance_axis():
    text = _spec("s = to_signal(x)", "y = to_items(s)", input_type="sequence[B, T, 3]")
    assert _type(text, "s") == "signal[B, 3, T]" and _type(text) == "sequence[B, T, 3]"
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    _agree_with(_spec("y = to_signal(x)", input_type="sequence[B, T, 3]"), x, lambda m, x: x.transpose(1, 2))
    _agree_with(_spec("y = to_items(x)", input_type="signal[B, 3, 5]"), x.transpose(1, 2).contiguous(),
                lambda m, x: x.transpose(1, 2))


def test_concat_items_sums_item_counts():
    two = "model m {{\n  input a: sequence[B, T, 2]\n  input b: sequence[B, {n}, 2]\n  y = concat_items(a, b)\n" \
          "  return y\n}}\n"
    assert _type(two.format(n="S")) == "sequence[B, T+S, 2]"
    assert _type(two.format(n="3")) == "sequence[B, T+3, 2]"
    assert _type(two.format(n="3").replace("B, T,", "B, 4,")) == "sequence[B, 7, 2]"
    model = rpn2c.compile(two.format(n="S"))
    a, b = torch.randn(2, 4, 2), torch.randn(2, 1, 2)
    assert torch.equal(model(a, b), torch.cat([a, b], dim=1))


@pytest.mark.parametrize("input_type, start, stop, want", [
    ("sequence[B, T, 6]", 0, 4, "sequence[B, T, 4]"), ("sequence[B, T, 6]", 4, None, "sequence[B, T, 2]"),
    ("vector[B, 6]", -2, None, "vector[B, 2]"), ("signal[B, 6, 5]", 1, 3, "signal[B, 2, 5]"),
])
def test_slice_features_keeps_a_feature_range(input_type, start, stop, want):
    bounds = f"start = {start}" + ("" if stop is None else f", stop = {stop}")
    text = _spec(f"y = slice_features(x, {bounds})", input_type=input_type)
    assert _type(text) == want
    shape = [2, *(int(d) if d.isdigit() else 3 for d in input_type.split("[")[1].rstrip("]").split(", ")[1:])]
    x = torch.randn(*shape, dtype=torch.float64)
    fa = 1 if input_type.startswith("signal") else -1
    _agree_with(text, x, lambda m, x: x.narrow(fa, start % 6, len(range(6)[start:stop])))


@pytest.mark.parametrize("line, input_type, message", [
    ("y = to_signal(x)", "vector[B, 3]", "to_signal needs a batched, batch-first sequence"),
    ("y = to_signal(x)", "time_major[T, B, 3]", "to_signal needs a batched, batch-first sequence"),
    ("y = concat_items(x, x2)", "vector[B, 3]", "concat_items needs batched, batch-first sequences"),
    ("y = slice_features(x, start = 3)", "sequence[B, T, 3]", "keeps no feature"),
])
def test_layout_op_errors_are_located(line, input_type, message):
    lines = ["x2 = flatten(x)", line] if "x2" in line else [line]
    with pytest.raises(rpn2c.SpecError) as exc:
        rpn2c.check(_spec(*lines, input_type=input_type), "m.rpn")
    d = exc.value.diagnostics[0]
    assert d.code == "E0403" and message in d.message


# ------------------------------------------------------------------------------------------------ from_torch
def test_from_torch_embedding_then_encoder_layer():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Embedding(11, 8, padding_idx=0),
                           nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)).double().eval()
    x = torch.randint(0, 11, (3, 5))
    spec = rpn2c.from_torch(module, (x,))
    assert "input x: tokens[B, T]" in spec.text and "embedding(x, vocab = 11, dim = 8, padding_idx = 0)" in spec.text
    for reference in (False, True):
        model = spec.compile(reference=reference).double().eval()
        assert_close(model(x), module(x))
        x2 = torch.randint(0, 11, (2, 9))  # another length: T stays symbolic
        assert_close(model(x2), module(x2))


@pytest.mark.parametrize("kwargs, option", [({"max_norm": 1.0}, "max_norm"),
                                            ({"scale_grad_by_freq": True}, "scale_grad_by_freq"),
                                            ({"sparse": True}, "sparse")])
def test_from_torch_refuses_embedding_options_without_an_rpn2_form(kwargs, option):
    with pytest.raises(TorchImportError, match=option):
        rpn2c.from_torch(nn.Embedding(5, 3, **kwargs), (torch.randint(0, 5, (2, 4)),))


def test_from_torch_refuses_ids_without_a_batch_axis():
    with pytest.raises(TorchImportError, match=r"expected batched integer ids \[B, T\], got torch.int64 \[4\]"):
        rpn2c.from_torch(nn.Embedding(5, 3), (torch.randint(0, 5, (4,)),))
