"""The fused recurrent kernel's weights are views of one flat buffer, as ``nn.LSTM`` keeps them on cuDNN.

cuDNN copies separate weight tensors into one buffer on every call; views of one buffer it uses in place. The
layout (one buffer per kernel call, tensors in the kernel's order, ``state_dict`` unchanged) survives conversions,
loads and copies; values and gradients equal ``nn.LSTM``/``nn.GRU``/``nn.RNN`` in float64, also after optimiser
steps that update the views in place. A dispatch trace of one forward on the CPU proves that no call prepares the
weights (no copy, concatenation or fill of a weight, nothing computed that the inputs do not reach): an
implementation that compacts them per call fails it, as the test of the test shows. Under autocast the buffer is
cast once per call and the kernel gets views of the cast buffer (a dispatch trace and a ``make_fx`` graph count
one cast; casting each weight, which cuDNN compacts again, fails them).
"""

from __future__ import annotations

import copy
import operator
from collections import Counter

import pytest
import torch
from torch import nn
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import rpn2c
from rpn2c.functional import rnn_weights
from rpn2c.functional.rnn_weights import is_flat
from rpn2c.lower.recurrent import RecurrentModule
from tests.op_count import count_ops, is_view_op

TORCH = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


def _text(cell="lstm", F=3, H=4, L=2, bi=True, bias="true", kappa=""):
    settings = f"cell = {cell}  out = {H}  layers = {L}  bidirectional = {str(bi).lower()}  bias = {bias}  {kappa}"
    return f"model m {{\n  input x: sequence[B, T, {F}]\n  y = recurrent(x) {{ {settings} }}\n  return y\n}}"


def _groups(model) -> list[list[torch.Tensor]]:
    """The recurrent layer's kernel tensors, one list per kernel call (all layers, or each layer behind its κ)."""
    m = model.y
    S, dirs = m.spec.layers, m.spec.directions
    per = [[w for d in range(dirs) for w in m._kernel_weights(i, d)] for i in range(S)]
    return [sum(per, [])] if m.identity_kappa else per


def _assert_flat(model):
    storages = set()
    for tensors in _groups(model):
        assert is_flat(tensors), [(t.untyped_storage().data_ptr(), t.storage_offset()) for t in tensors]
        first = tensors[0]
        assert first.storage_offset() == 0  # cuDNN reads the buffer from its start
        assert first.untyped_storage().nbytes() == sum(t.numel() for t in tensors) * first.element_size()
        storages.add(first.untyped_storage().data_ptr())
    assert len(storages) == len(_groups(model))


def _rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------------------------------------------- layout
@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn", 'rnn(nonlinearity = "relu")'])
@pytest.mark.parametrize("bias", ["true", "false", '"single"'])
@pytest.mark.parametrize("kappa", ["", "kappa = taylor(d = 2)"])
def test_each_kernel_call_reads_one_flat_buffer_and_the_state_dict_is_torch_s(cell, bias, kappa):
    model = rpn2c.compile(_text(cell, bias=bias, kappa=kappa))
    _assert_flat(model)
    names = {f"y.{k}_l{i}{s}" for i in range(2) for s in ("", "_reverse")
             for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")[: {"true": 4, "false": 2}.get(bias, 3)]}
    state = model.state_dict()
    assert set(state) == names  # the zero b_hh of bias = "single" is a buffer outside the state_dict
    for k, v in state.items():
        assert v.data_ptr() == model.get_parameter(k).data_ptr()
    if bias == '"single"':
        zeros = [t for n, t in model.y.named_buffers() if n.startswith("zero_bias_hh")]
        assert len(zeros) == 4 and all(not z.any() for z in zeros)


def test_the_buffer_survives_conversion_loading_and_copies():
    torch.manual_seed(0)
    hand = nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    model = rpn2c.compile(_text()).double()
    _assert_flat(model)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    model.load_state_dict({f"y.{k}": v for k, v in hand.state_dict().items()})
    _assert_flat(model)
    assert_close(model.y.weight_hh_l1_reverse, hand.weight_hh_l1_reverse, rtol=0, atol=0)
    fresh = {f"y.{k}": torch.randn_like(v) for k, v in hand.state_dict().items()}
    model.load_state_dict(fresh, assign=True)  # the loaded tensors themselves: flattened again
    _assert_flat(model)
    assert_close(model.y.bias_ih_l0, fresh["y.bias_ih_l0"], rtol=0, atol=0)
    twin = copy.deepcopy(model)
    _assert_flat(twin)
    assert twin.y.weight_ih_l0.data_ptr() != model.y.weight_ih_l0.data_ptr()
    before = model.y.weight_ih_l0.untyped_storage().data_ptr()
    model.float().double()
    _assert_flat(model)
    assert_close(model.y.weight_hh_l1, fresh["y.weight_hh_l1"].float().double(), rtol=0, atol=0)
    model.share_memory()  # the storage moves in place: the views stay one buffer, shared
    _assert_flat(model)
    assert all(p.is_shared() for p in model.parameters())
    assert before != model.y.weight_ih_l0.untyped_storage().data_ptr()


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_values_gradients_and_optimiser_steps_equal_torch_s_module_in_float64(cell):
    """The optimiser updates the views in place: after two SGD steps on both, the outputs still agree."""
    torch.manual_seed(0)
    hand = TORCH[cell](3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    model = rpn2c.compile(_text(cell)).double()
    model.load_state_dict({f"y.{k}": v for k, v in hand.state_dict().items()})
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (hand, model)]
    x = _rand(2, 5, 3)
    for _ in range(2):
        want, got = hand(x)[0], model(x)
        assert_close(got, want, rtol=1e-12, atol=1e-12)
        for opt, y in zip(opts, (want, got)):
            opt.zero_grad()
            (y * y).sum().backward()
        for name, p in hand.named_parameters():
            assert_close(model.get_parameter(f"y.{name}").grad, p.grad, rtol=1e-10, atol=1e-12, msg=name)
        for opt in opts:
            opt.step()
        _assert_flat(model)
    assert_close(model(x), hand(x)[0], rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------- dispatch trace
class _Unreached(TorchDispatchMode):
    """Counts the non-view aten calls that no input reaches: work a call repeats on the weights alone (copying,
    concatenating, filling them). A tensor is reached when it is an input or an output of a call with a reached
    argument."""

    def __init__(self, inputs):
        super().__init__()
        self.reached = {id(t) for t in inputs}
        self.keep = list(inputs)  # reached tensors stay alive, so their ids are not reused
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(id(t) in self.reached for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)):
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.reached.add(id(t))
                    self.keep.append(t)
        elif not is_view_op(func):
            self.ops[func.overloadpacket.__name__] += 1
        return out


def _unreached(model, x) -> Counter:
    with _Unreached([x]) as mode:
        model(x)
    return mode.ops


CASES = [("lstm", "true", ""), ("gru", "true", ""), ("rnn", "false", ""), ("lstm", '"single"', ""),
         ("gru", '"single"', "kappa = taylor(d = 2)")]


@pytest.mark.parametrize("cell, bias, kappa", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # oneDNN's kernel, ATen's own
@pytest.mark.parametrize("grad", [False, True])
def test_a_forward_does_no_work_on_the_weights_alone(cell, bias, kappa, dtype, grad):
    model = rpn2c.compile(_text(cell, bias=bias, kappa=kappa)).to(dtype).train(grad)
    x = _rand(2, 5, 3, dtype=dtype)
    with torch.set_grad_enabled(grad):
        assert _unreached(model, x) == {}


def _compacting(self, layer, direction):
    """A wrong implementation: the kernel's tensors copied into one buffer on every call (cuDNN's compaction)."""
    ws = [getattr(self, n) for n in self._kernel_names[layer * self.spec.directions + direction]]
    flat = torch.cat([w.reshape(-1) for w in ws])
    return [v.view_as(w) for v, w in zip(flat.split([w.numel() for w in ws]), ws)]


def _zero_per_call(self, layer, direction):
    """A wrong implementation: bias = "single"'s zero b_hh made on every call."""
    ws = [getattr(self, n) for n in self._kernel_names[layer * self.spec.directions + direction]][:3]
    return ws + [torch.zeros(ws[2].shape, dtype=ws[2].dtype)]


@pytest.mark.parametrize("wrong, bias, found", [(_compacting, "true", "cat"), (_zero_per_call, '"single"', "zeros")])
def test_the_trace_catches_weights_prepared_per_call(monkeypatch, wrong, bias, found):
    model = rpn2c.compile(_text(bias=bias)).double()
    x = _rand(2, 5, 3)
    want = model(x)
    monkeypatch.setattr(RecurrentModule, "_kernel_weights", wrong)
    assert_close(model(x), want, rtol=0, atol=0)  # the same values...
    assert _unreached(model, x)[found] >= 1  # ...but work on the weights in every call


def test_a_forward_runs_the_operations_of_torch_s_module():
    """Per forward exactly nn.LSTM's operations (float32: oneDNN's layer per layer and direction, float64: ATen's
    cell per step), the zero initial states made once instead of twice: the flat buffer adds none."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        hand = nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).to(dtype)
        model = rpn2c.compile(_text()).to(dtype)
        model.load_state_dict({f"y.{k}": v for k, v in hand.state_dict().items()})
        x = _rand(2, 5, 3, dtype=dtype)
        ours, theirs = count_ops(lambda: model(x)), count_ops(lambda: hand(x))
        assert (ours.pop("new_zeros"), theirs.pop("zeros")) == (1, 2)
        assert ours == theirs


# ------------------------------------------------------------------------------------------------- autocast
def _onednn(monkeypatch, how: str):
    """oneDNN's bfloat16 LSTM: ``"real"`` this CPU's (skipped without it), ``"assumed"`` taken as there, so the
    layer casts as it would on such a CPU instead of running in float32 (the kernel that then runs on bfloat16
    inputs is ATen's own where oneDNN lacks it: the same values for the same inputs, whichever casts them)."""
    from rpn2c.functional import rnn_op

    if how == "real" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("this CPU has no oneDNN bfloat16 LSTM (no AVX-512 BF16): the layer runs in float32 here")
    if how == "assumed":
        monkeypatch.setitem(rnn_op._ONEDNN_RUNS, torch.bfloat16, True)


def _route(monkeypatch, route: str):
    """The kernel's route under test: ``"opaque"`` the op of a compiled graph, ``"eager"`` torch's kernel fed
    autocast's dtype by the layer, as on CUDA (:data:`CAST_FIRST`)."""
    import rpn2c.lower.recurrent as recurrent

    if route == "opaque":
        monkeypatch.setattr(RecurrentModule, "_opaque", lambda self, x, grad: True)
    else:
        monkeypatch.setattr(recurrent, "CAST_FIRST", (*recurrent.CAST_FIRST, "cpu"))


def _cast_each(tensors, dtype, where=None):
    """A wrong implementation: each weight cast on its own (cuDNN compacts the casts on every call)."""
    return [t.to(dtype) for t in tensors]


AUTOCAST_CASES = [("true", ""), ('"single"', ""), ("false", ""), ("true", "kappa = taylor(d = 2)")]


@pytest.mark.parametrize("bias, kappa", AUTOCAST_CASES)
@pytest.mark.parametrize("route", ["opaque", "eager"])
@pytest.mark.parametrize("onednn", ["real", "assumed"])
def test_under_autocast_the_weights_are_cast_once_per_kernel_call(monkeypatch, onednn, route, bias, kappa):
    """A training forward under CPU bfloat16 autocast casts each kernel call's flat buffer once (one ``cat`` of the
    weights as they lie in it, one ``_to_copy``: the only work on the weights alone) and hands the kernel views of
    the cast buffer; values and gradients are those of casting each weight (a cast rounds elementwise), which
    the dispatch trace tells apart."""
    _onednn(monkeypatch, onednn)
    _route(monkeypatch, route)
    model = rpn2c.compile(_text(bias=bias, kappa=kappa))
    x = _rand(2, 5, 3, dtype=torch.float32)
    calls = len(_groups(model))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _unreached(model, x) == {"cat": calls, "_to_copy": calls}
        got = model(x)
    assert got.dtype == torch.bfloat16
    grads = torch.autograd.grad(got.float().square().sum(), list(model.parameters()))
    monkeypatch.setattr(rnn_weights, "cast", _cast_each)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _unreached(model, x)["_to_copy"] == sum(len(g) for g in _groups(model))  # the trace can fail
        want = model(x)
    assert_close(got, want, rtol=0, atol=0)
    assert_close(grads, torch.autograd.grad(want.float().square().sum(), list(model.parameters())),
                 rtol=0, atol=0)


@pytest.mark.parametrize("route", ["opaque", "eager"])
def test_a_traced_autocast_forward_casts_the_flat_buffer_once(monkeypatch, route):
    """``make_fx`` of a training forward under CPU bfloat16 autocast, the parameters as graph inputs: exactly one
    ``_to_copy`` reads the weights (through a ``cat`` of all of them), and every weight the kernel receives is a
    view of that one cast buffer."""
    from torch.fx.experimental.proxy_tensor import make_fx

    _onednn(monkeypatch, "assumed")
    _route(monkeypatch, route)
    model = rpn2c.compile(_text())
    params = dict(model.named_parameters())

    def forward(p, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.func.functional_call(model, p, (x,))

    graph = make_fx(forward, tracing_mode="fake")(params, _rand(2, 5, 3, dtype=torch.float32)).graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"][: len(params)]
    derived = set(placeholders)  # nodes computed from the weights alone
    for node in graph.nodes:
        if node.op == "call_function" and node.all_input_nodes and set(node.all_input_nodes) <= derived:
            derived.add(node)
    casts = [n for n in derived if n.op == "call_function" and n.target == torch.ops.aten._to_copy.default]
    assert len(casts) == 1 and casts[0].args[0].target == torch.ops.aten.cat.default
    assert set(casts[0].args[0].args[0]) <= derived  # the cat reads the weights only...
    assert len(casts[0].args[0].args[0]) == len(params)  # ...all of them
    (split,) = casts[0].users
    assert split.target == torch.ops.aten.split_with_sizes.default
    if route == "opaque":
        (op,) = [n for n in graph.nodes if n.op == "call_function" and "rpn2c" in str(n.target)]
        for w in op.args[2]:  # each weight the op receives: a view of one piece of the split
            while w.target != operator.getitem:
                assert w.target == torch.ops.aten.view.default, w.target
                w = w.args[0]
            assert w.args[0] is split


@pytest.mark.compile
def test_a_compiled_graph_hands_the_op_views_of_one_cast_buffer(monkeypatch):
    """torch.compile (one graph) of a training forward under CPU bfloat16 autocast: the opaque op receives the
    weights in bfloat16 as views of one storage, each at its offset in the flat buffer, and every parameter gets
    its gradient."""
    from rpn2c.functional import rnn_op

    _onednn(monkeypatch, "assumed")
    received = []
    run = rnn_op._run

    def spy(kernel, x, hx, weights, *args):
        received.append(([w.untyped_storage().data_ptr() for w in weights], [w.storage_offset() for w in weights],
                         {w.dtype for w in weights}))
        return run(kernel, x, hx, weights, *args)

    monkeypatch.setattr(rnn_op, "_run", spy)
    torch._dynamo.reset()
    model = rpn2c.compile(_text())
    (tensors,) = _groups(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.compile(model, backend="aot_eager", fullgraph=True)(_rand(2, 5, 3, dtype=torch.float32))
    y.float().square().sum().backward()
    ptrs, offsets, dtypes = received[0]
    assert len(set(ptrs)) == 1 and dtypes == {torch.bfloat16}
    assert offsets == [t.storage_offset() for t in tensors]
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    torch._dynamo.reset()


# ------------------------------------------------------------------------------------------------------ CUDA
COMPACTED = "not part of single contiguous chunk of memory"  # ATen's warning on every call that compacts


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cell, bias, kappa", CASES)
def test_cudnn_runs_on_the_flat_buffer_without_compacting_it(cell, bias, kappa):
    """On CUDA the buffer is cuDNN's (``_cudnn_rnn_flatten_weight`` after ``.to``): no forward or backward, in
    training or eval mode, compacts the weights; one whose buffer is broken does (the check can fail). Values equal
    the CPU's in float64; a training step launches no more CUDA kernels than ``nn.<cell>``'s for the same layer."""
    import warnings

    from benchmarks.kernels import count_step

    model = rpn2c.compile(_text(cell, bias=bias, kappa=kappa)).double()
    x = _rand(2, 5, 3)
    want = model(x)
    model.cuda()
    for tensors in _groups(model):  # one buffer per kernel call, at cuDNN's offsets
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for training in (True, False):
            y = model.train(training)(x.cuda())
            y.square().sum().backward()
        assert_close(y.cpu(), want, rtol=1e-10, atol=1e-10)
    assert not [w for w in seen if COMPACTED in str(w.message)]
    if bias == "true" and not kappa:
        hand = TORCH[cell](3, 4, num_layers=2, bidirectional=True, batch_first=True).double().cuda()
        theirs = count_step(_First(hand), (x.cuda(),), "cuda")
        ours = count_step(model, (x.cuda(),), "cuda")
        assert sum(ours.values()) <= sum(theirs.values()), (ours, theirs)
    with torch.no_grad():
        model.y.weight_hh_l0.data = model.y.weight_hh_l0.data.clone()  # out of the buffer
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model(x.cuda())
    assert [w for w in seen if COMPACTED in str(w.message)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cell, bias, kappa, compiled", [(*c, False) for c in CASES] + [(*CASES[0], True),
                                                                                         (*CASES[4], True)])
def test_under_cuda_autocast_cudnn_runs_on_the_cast_buffer_without_compacting_it(cell, bias, kappa, compiled):
    """bfloat16 autocast on CUDA, eager and compiled (inductor), training and eval: the layer casts each kernel
    call's flat buffer once and cuDNN takes the views of the cast buffer as its own (no compaction warning); it
    computes in float16, as ATen's autocast rule for cuDNN's RNNs does, close to the float32 output."""
    import warnings

    torch._dynamo.reset()
    model = rpn2c.compile(_text(cell, bias=bias, kappa=kappa)).cuda()
    x = _rand(2, 5, 3, dtype=torch.float32).cuda()
    with torch.no_grad():
        want = model(x)
    run = torch.compile(model, fullgraph=True) if compiled else model
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for training in (True, False):
            model.train(training)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = run(x)
            y.float().square().sum().backward()
            assert y.dtype == torch.float16
            assert_close(y.float(), want, rtol=2e-2, atol=2e-2)
    assert not [w for w in seen if COMPACTED in str(w.message)]
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    torch._dynamo.reset()


class _First(nn.Module):
    """``nn.LSTM``/``nn.GRU``/``nn.RNN`` returning the output sequence only."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)[0]
