"""The recurrent construct, grouped heads, separate attention keys and time-major layouts.

``recurrent(x) { cell = rnn|gru|lstm ... }`` must equal torch's nn.RNN/GRU/LSTM exactly (outputs and parameter
gradients, float64) in both lowerings; the fused-kernel, time-loop and literal chain-matrix forms must agree; and
the paper's one-step chain layer is shown to be a different (finite receptive field) function.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c
from tests.test_lowering_equivalence import _n, _rand, assert_equivalent

TORCH_CELLS = {"rnn": torch.nn.RNN, 'rnn(nonlinearity = "relu")': torch.nn.RNN, "gru": torch.nn.GRU,
               "lstm": torch.nn.LSTM}


def _recurrent_text(cell, F, H, L, bi, bias, time_major, with_state, extra=""):
    S = L * (2 if bi else 1)
    lines = [f"input x: {'time_major[T, B, %d]' % F if time_major else 'sequence[B, T, %d]' % F}"]
    settings_ = [f"cell = {cell}", f"out = {H}", f"layers = {L}", f"bidirectional = {str(bi).lower()}",
                 f"bias = {str(bias).lower()}"]
    if with_state:
        lines.append(f"input h0: state[{S}, B, {H}]")
        settings_.append("state = h0")
        if cell == "lstm":
            lines.append(f"input c0: state[{S}, B, {H}]")
            settings_.append("cell_state = c0")
    if extra:
        settings_.append(extra)
    body = "\n  ".join(lines)
    out = "time_major(y)" if time_major else "y"
    return (f"model m {{\n  {body}\n  y = recurrent(x) {{ {'  '.join(settings_)} }}\n  z = {out}\n"
            f"  return z\n}}")


@given(cell=st.sampled_from(sorted(TORCH_CELLS)), F=st.integers(1, 4), H=st.integers(1, 5), L=st.integers(1, 3),
       bi=st.booleans(), bias=st.booleans(), time_major=st.booleans(), with_state=st.booleans(),
       B=st.integers(1, 3), T=st.integers(1, 5))
@settings(max_examples=_n(30), deadline=None)
def test_recurrent_equals_torch(cell, F, H, L, bi, bias, time_major, with_state, B, T):
    kw = {"nonlinearity": "relu"} if "relu" in cell else {}
    torch.manual_seed(0)
    mod = TORCH_CELLS[cell](F, H, num_layers=L, bidirectional=bi, bias=bias, batch_first=not time_major,
                            **kw).double().eval()
    text = _recurrent_text(cell.split("(")[0] if "relu" not in cell else cell, F, H, L, bi, bias, time_major,
                           with_state)
    graph = rpn2c.check(text)
    assert graph.param_count == sum(p.numel() for p in mod.parameters())
    S = L * (2 if bi else 1)
    x = _rand(*((T, B, F) if time_major else (B, T, F)))
    h0, c0 = _rand(S, B, H, seed=4), _rand(S, B, H, seed=5)
    if cell == "lstm":
        want = mod(x, (h0, c0))[0] if with_state else mod(x)[0]
        args = (x, h0, c0) if with_state else (x,)
    else:
        want = mod(x, h0)[0] if with_state else mod(x)[0]
        args = (x, h0) if with_state else (x,)
    w = torch.randn(want.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    (want * w).sum().backward()
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double().eval()
        model.load_state_dict({f"y.{k}": v for k, v in mod.state_dict().items()})
        got = model(*args)
        assert_close(got, want, rtol=1e-10, atol=1e-10)
        (got * w).sum().backward()
        for name, p in mod.named_parameters():
            assert_close(model.get_parameter(f"y.{name}").grad, p.grad, rtol=1e-9, atol=1e-9)


@given(cell=st.sampled_from(["rnn", "gru", "lstm"]), bi=st.booleans(), L=st.integers(1, 2),
       kappa=st.sampled_from(["", "kappa = chebyshev(d = 2)", "kappa = taylor(d = 2)"]),
       kappa_state=st.sampled_from(["", "kappa_state = chebyshev(d = 2)",
                                    "kappa_state = bspline(grid = 2, order = 1)"]))
@settings(max_examples=_n(15), deadline=None)
def test_recurrent_expansions_fused_loop_and_reference_agree(cell, bi, L, kappa, kappa_state):
    """κ on the input keeps the fused kernel; κ on the fed-back state needs the time loop; both equal the oracle."""
    text = _recurrent_text(cell, 3, 4, L, bi, True, False, False, f"{kappa}  {kappa_state}".strip())
    graph = rpn2c.compile(text).graph
    node = graph.node("y")
    assert node.plan == (["time_loop"] if kappa_state else ["fused_recurrent"])
    assert_equivalent(text, {"x": _rand(2, 5, 3)})


def test_recurrent_is_causal_and_sees_the_whole_past():
    text = _recurrent_text("gru", 2, 3, 2, False, True, False, False)
    model = rpn2c.compile(text).double().eval()
    x = _rand(1, 6, 2)
    y = model(x)
    later = x.clone()
    later[:, 4:] += 1.0
    assert_close(model(later)[:, :4], y[:, :4])  # t < 4 ignores inputs after t
    first = x.clone()
    first[:, 0] += 1.0
    assert (model(first)[:, -1] - y[:, -1]).abs().max() > 1e-6  # the last step still sees x_0


def test_paper_chain_layer_is_a_one_step_convolution_not_a_recurrence():
    """The paper's RNN layer (eq 175): y_t depends on x_t and x_{t-1} only; the recurrent construct on all x_{<=t}."""
    chain = """model m {
      input x: sequence[B, 6, 2]
      y = head(x) { xi_instance = chain(direction = "forward")  out = 3  pi = linear  post = [tanh] }
      return y
    }"""
    rec = _recurrent_text("rnn", 2, 3, 1, False, True, False, False)
    x = _rand(1, 6, 2)
    moved = x.clone()
    moved[:, 0] += 1.0
    for text, sees_start in ((chain, False), (rec, True)):
        model = rpn2c.compile(text).double().eval()
        delta = (model(moved) - model(x))[0].abs().amax(-1)  # per time step
        assert delta[0] > 1e-6 and delta[1] > 1e-6
        assert (delta[2:] > 1e-9).all().item() is sees_start


@pytest.mark.parametrize("text, code, line", [
    ("model m { input x: sequence[B, T, 2]\n y = recurrent(x) { cell = gru  out = 3  cell_state = x } return y }",
     "E0303", 2),
    ("model m { input x: sequence[B, T, 2]\n input h: state[2, B, 3]\n"
     " y = recurrent(x) { cell = gru  out = 3  state = h } return y }", "E0402", 3),
    ("model m { input x: vector[B, 2]\n y = recurrent(x) { out = 3 } return y }", "E0402", 2),
    ("model m { input x: sequence[B, T, 2]\n y = recurrent(x) { cell = gru  out = 3  layer = 2 } return y }",
     "E0304", 2),
    ("model m { input x: sequence[B, T, 2]\n y = recurrent(x) { cell = relu  out = 3 } return y }", "E0301", 2),
    ("model m { input x: sequence[B, T, 2]\n y = recurrent(x) { cell = gru } return y }", "E0303", 2),
    ("model m { input x: sequence[B, T, 2]\n y = recurrent(x) { out = 3  dropout = 1.5 } return y }", "E0303", 2),
])
def test_recurrent_errors_are_located(text, code, line):
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    diag = info.value.diagnostics[0]
    assert (diag.code, diag.span.line) == (code, line), info.value


# ------------------------------------------------------------------------------------------------ one bias
def _single_text(cell, F, H, L, bi, with_state, extra=""):
    return _recurrent_text(cell, F, H, L, bi, True, False, with_state, extra).replace(
        "bias = true", 'bias = "single"')


def _elman_by_hand(x, h0, weights, L, bi, relu):
    """Eq. 1 of seed 002 stacked: h_t = σ(U x_t + V h_{t−1} + b), ONE bias per layer and direction."""
    sigma = torch.relu if relu else torch.tanh
    dirs = 2 if bi else 1
    out = x
    for i in range(L):
        outs = []
        for d in range(dirs):
            u, v, b = weights[i * dirs + d]
            h = x.new_zeros(x.shape[0], v.shape[0]) if h0 is None else h0[i * dirs + d]
            states = [None] * x.shape[1]
            for t in (range(x.shape[1] - 1, -1, -1) if d else range(x.shape[1])):
                h = sigma(out[:, t] @ u.T + h @ v.T + b)
                states[t] = h
            outs.append(torch.stack(states, 1))
        out = torch.cat(outs, -1)
    return out


def _every_form(text, monkeypatch):
    """The same spec in each form that runs it: the fused kernel, the kernel as the opaque op (what a compiled
    graph runs), the time loop (no ``fused_recurrent`` rule) and the reference lowering's literal chain."""
    from rpn2c.lower.build import CompiledModel
    from rpn2c.lower.recurrent import RecurrentModule
    from rpn2c.passes import optimize

    yield "fused", rpn2c.compile(text).double()
    with monkeypatch.context() as m:
        m.setattr(RecurrentModule, "_opaque", lambda self, x, grad: True)
        yield "opaque", rpn2c.compile(text).double()
    loop = CompiledModel(optimize(rpn2c.check(text), disable={"fused_recurrent"})).double()
    assert "lowering=time_loop" in repr(loop.y)
    yield "loop", loop
    yield "reference", rpn2c.compile(text, reference=True).double()


@given(relu=st.booleans(), F=st.integers(1, 3), H=st.integers(1, 4), L=st.integers(1, 2), bi=st.booleans(),
       with_state=st.booleans(), T=st.integers(1, 5))
@settings(max_examples=_n(12), deadline=None)
def test_a_single_bias_rnn_equals_a_hand_written_elman_rnn_in_every_form(relu, F, H, L, bi, with_state, T):
    """``bias = "single"``: one vector b per layer and direction, added once — 32 fewer values than torch's two."""
    cell = 'rnn(nonlinearity = "relu")' if relu else "rnn"
    text = _single_text(cell, F, H, L, bi, with_state)
    dirs = 2 if bi else 1
    widths = [F] + [H * dirs] * (L - 1)
    assert rpn2c.check(text).param_count == dirs * sum(H * d + H * H + H for d in widths)
    S = L * dirs
    weights = [(_rand(H, widths[s // dirs], seed=10 + s), _rand(H, H, seed=20 + s) / 2, _rand(H, seed=30 + s))
               for s in range(S)]
    leaves = [t.requires_grad_(True) for w in weights for t in w]
    x, h0 = _rand(2, T, F, seed=1), (_rand(S, 2, H, seed=2) if with_state else None)
    want = _elman_by_hand(x, h0, weights, L, bi, relu)
    g = _rand(*want.shape, seed=3)
    want_grads = torch.autograd.grad((want * g).sum(), leaves)
    state = {f"y.{k}_l{i}{sfx}": t for i in range(L) for d, sfx in enumerate(("", "_reverse")[:dirs])
             for k, t in zip(("weight_ih", "weight_hh", "bias_ih"), weights[i * dirs + d])}
    with pytest.MonkeyPatch.context() as mp:  # not the fixture: hypothesis re-enters the test per example
        for form, model in _every_form(text, mp):
            model.load_state_dict({k: v.detach() for k, v in state.items()}, strict=True)
            got = model(x, h0) if with_state else model(x)
            assert_close(got, want, rtol=1e-10, atol=1e-10, msg=form)
            params = [model.get_parameter(k) for k in state]
            for k, a, b in zip(state, torch.autograd.grad((got * g).sum(), params), want_grads):
                assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"{form}: gradient of {k}")


@pytest.mark.parametrize("cell, cls", [("gru", torch.nn.GRU), ("lstm", torch.nn.LSTM)])
def test_single_bias_gated_cells_are_torch_s_cells_with_a_zero_state_bias(cell, cls, monkeypatch):
    """GRU/LSTM with ``bias = "single"``: torch's layer with ``b_hh = 0`` (for the GRU the one bias stays outside
    the reset gate's product), in every form; ``b_hh`` is no parameter and gets no gradient."""
    torch.manual_seed(0)
    mod = cls(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    with torch.no_grad():
        for name, p in mod.named_parameters():
            if name.startswith("bias_hh"):
                p.zero_()
    text = _single_text(cell, 3, 4, 2, True, False)
    ours = {f"y.{k}": v for k, v in mod.state_dict().items() if not k.startswith("bias_hh")}
    assert rpn2c.check(text).param_count == sum(v.numel() for v in ours.values())
    x = _rand(2, 5, 3)
    want = mod(x)[0]
    g = _rand(*want.shape, seed=3)
    (want * g).sum().backward()
    for form, model in _every_form(text, monkeypatch):
        assert set(model.state_dict()) == set(ours)
        model.load_state_dict(ours, strict=True)
        got = model(x)
        assert_close(got, want, rtol=1e-10, atol=1e-10, msg=form)
        (got * g).sum().backward()
        for k, p in model.named_parameters():
            assert_close(p.grad, mod.get_parameter(k[2:]).grad, rtol=1e-9, atol=1e-9, msg=f"{form}: {k}")


@pytest.mark.parametrize("cell", ["diagonal", "mingru", "gla"])
def test_single_bias_is_refused_for_a_cell_with_one_bias_of_its_own(cell):
    text = ("model m { input x: sequence[B, T, 2]\n"
            f' y = recurrent(x) {{ cell = {cell}  out = 2\n  bias = "single" }} return y }}')
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    diag = info.value.diagnostics[0]
    assert (diag.code, diag.span.line, diag.span.col) == ("E0303", 3, 10), info.value
    assert "bias = true" in str(info.value)


def test_bias_takes_true_false_or_single():
    text = 'model m { input x: sequence[B, T, 2]\n y = recurrent(x) { out = 2  bias = "both" } return y }'
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    diag = info.value.diagnostics[0]
    assert (diag.code, diag.span.line) == ("E0303", 2) and '"single"' in diag.message


# ------------------------------------------------------------------------------------------------ groups
@given(rank=st.integers(1, 2), groups=st.sampled_from([1, 2, 3]), cpg=st.integers(1, 2), opg=st.integers(1, 2),
       k=st.integers(1, 3), stride=st.integers(1, 2), dilation=st.integers(1, 2), pad=st.integers(0, 2),
       mode=st.sampled_from(["zeros", "circular"]), L=st.integers(5, 7), bias=st.booleans())
@settings(max_examples=_n(30), deadline=None)
def test_grouped_head_equals_grouped_conv(rank, groups, cpg, opg, k, stride, dilation, pad, mode, L, bias):
    cin, cout = groups * cpg, groups * opg
    if mode == "circular" and pad > L:
        return
    conv = (torch.nn.Conv1d if rank == 1 else torch.nn.Conv2d)(
        cin, cout, k, stride=stride, padding=pad, dilation=dilation, groups=groups, bias=bias,
        padding_mode=mode).double()
    spatial = [L] * rank
    typ = f"signal[B, {cin}, {L}]" if rank == 1 else f"image[B, {cin}, {L}, {L}]"
    text = (f"model m {{ input x: {typ}\n y = head(x) {{ xi_attribute = grid_patch(size = {k}, stride = {stride}, "
            f"pad = {pad}, dilation = {dilation}, padding_mode = \"{mode}\")  groups = {groups}  out = {cout}  "
            f"bias = {str(bias).lower()} }}\n return y }}")
    x = _rand(2, cin, *spatial)
    sd = {"y.psi.weight": conv.weight.detach().reshape(cout, -1)}
    if bias:
        sd["y.bias"] = conv.bias.detach()
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        model.load_state_dict(sd)
        assert_close(model(x), conv(x), rtol=1e-10, atol=1e-10)
    assert rpn2c.check(text).param_count == sum(p.numel() for p in conv.parameters())


@given(groups=st.sampled_from([2, 3]), kappa=st.sampled_from(["identity", "chebyshev(d = 2)"]),
       mode=st.sampled_from(["padding", "aggregation"]), view=st.sampled_from(["grid", "items", "vector"]),
       channels=st.integers(1, 2))
@settings(max_examples=_n(20), deadline=None)
def test_grouped_heads_default_equals_reference(groups, kappa, mode, view, channels):
    c = 2 * groups
    fusion = "  channel_fusion = sum" if channels > 1 else ""
    common = f"groups = {groups}  kappa = {kappa}  out = {groups * 2}  channels = {channels}{fusion}"
    if view == "grid":
        text = (f"model m {{ input x: image[B, {c}, 5, 4]\n y = head(x) {{ xi_attribute = grid_patch(size = 3, "
                f"pad = 1, mode = \"{mode}\")  {common} }}\n return y }}")
        inputs = {"x": _rand(2, c, 5, 4)}
    elif view == "items":
        text = (f"model m {{ input x: sequence[B, 4, {c}]\n y = head(x) {{ xi_instance = chain(direction = "
                f"\"forward\")  {common} }}\n return y }}")
        inputs = {"x": _rand(2, 4, c)}
    else:
        text = f"model m {{ input x: vector[B, {c}]\n y = head(x) {{ {common} }}\n return y }}"
        inputs = {"x": _rand(3, c)}
    assert_equivalent(text, inputs)


@pytest.mark.parametrize("settings_, message", [
    ("groups = 2  out = 3", "must divide"),
    ("groups = 2  out = 4  kappa = taylor(d = 2)", "elementwise"),
])
def test_group_errors(settings_, message):
    text = f"model m {{ input x: image[B, 4, 5, 5]\n y = head(x) {{ xi_attribute = grid_patch(size = 3)\n {settings_} }}\n return y }}"
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    diag = info.value.diagnostics[0]
    assert message in diag.message and diag.span.line == 3


# ------------------------------------------------------------------------------------------------ keys, layouts
def test_attention_keys_from_a_separate_input_equal_multihead_attention():
    E, H, kd, vd = 6, 3, 4, 5
    mha = torch.nn.MultiheadAttention(E, H, kdim=kd, vdim=vd, batch_first=True).double().eval()
    text = f"""model m {{
      input q: sequence[B, 3, {E}]
      input k: sequence[B, 4, {kd}]
      input v: sequence[B, 4, {vd}]
      y = head(q, context = v) {{
        heads = {H}  xi_instance = attention(rank = {E // H}, bias = true, keys = k)  out = {E // H}
        fusion = concat_linear(out = {E})
      }}
      return y
    }}"""
    sd, d = {}, E // H
    for h in range(H):
        rows = slice(h * d, (h + 1) * d)
        pre = f"y.heads.h{h}."
        sd[pre + "xi_instance.w_q"] = mha.q_proj_weight[rows].T
        sd[pre + "xi_instance.w_k"] = mha.k_proj_weight[rows].T
        sd[pre + "xi_instance.b_q"] = mha.in_proj_bias[rows]
        sd[pre + "xi_instance.b_k"] = mha.in_proj_bias[E:2 * E][rows]
        sd[pre + "psi.weight"] = mha.v_proj_weight[rows]
        sd[pre + "bias"] = mha.in_proj_bias[2 * E:][rows]
    sd["y.fusion.linear.weight"], sd["y.fusion.linear.bias"] = mha.out_proj.weight, mha.out_proj.bias
    q, k, v = _rand(2, 3, E), _rand(2, 4, kd, seed=4), _rand(2, 4, vd, seed=5)
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double().eval()
        model.load_state_dict({n: t.detach() for n, t in sd.items()})
        assert_close(model(q, k, v), mha(q, k, v, need_weights=False)[0])


def test_attention_keys_must_match_the_value_items():
    text = """model m { input q: sequence[B, 3, 4]
      input k: sequence[B, 5, 4]
      input v: sequence[B, 4, 4]
      y = head(q, context = v) { xi_instance = attention(rank = 2, keys = k)  out = 4 }
      return y }"""
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    assert "keys" in info.value.diagnostics[0].message and info.value.diagnostics[0].span.line == 4


def test_time_major_inputs_and_outputs_round_trip():
    text = """model m {
      input x: time_major[T, B, 3]
      h = head(x) { xi_instance = chain(direction = "forward")  out = 2 }
      y = time_major(h)
      return y
    }"""
    batch_first = text.replace("time_major[T, B, 3]", "sequence[B, T, 3]").replace("time_major(h)", "relu(h)")
    graph = rpn2c.check(text)
    assert str(graph.node("x").type) == "time_major[T, B, 3]" and str(graph.node("y").type) == "time_major[T, B, 2]"
    a = rpn2c.compile(text).double()
    b = rpn2c.compile(batch_first.replace("relu(h)", "h"), reference=True).double()
    b.load_state_dict(a.state_dict())
    x = _rand(5, 2, 3)
    assert_close(a(x), b(x.transpose(0, 1)).transpose(0, 1))
    with pytest.raises(ValueError, match="time_major"):
        rpn2c.compile(text.replace("[T, B, 3]", "[T, 2, 3]"))(x[:, :1])


# ------------------------------------------------------------------------------------------------ shipped spec
class HandWrittenGRUClassifier(torch.nn.Module):
    """What specs/rnn.rpn states: Linear -> 2-layer GRU -> mean over time -> Linear."""

    def __init__(self, features=8, hidden=32, classes=4):
        super().__init__()
        self.embed = torch.nn.Linear(features, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.out(self.gru(self.embed(x))[0].mean(dim=1))


def test_shipped_rnn_spec_equals_hand_written_gru_classifier():
    torch.manual_seed(0)
    ref = HandWrittenGRUClassifier().double().eval()
    sd = {"e.psi.weight": ref.embed.weight, "e.bias": ref.embed.bias, "y.psi.weight": ref.out.weight,
          "y.bias": ref.out.bias, **{f"r.{k}": v for k, v in ref.gru.state_dict().items()}}
    x = _rand(3, 7, 8)
    for reference in (False, True):
        model = rpn2c.compile_file("specs/rnn.rpn", reference=reference).double().eval()
        model.load_state_dict({k: v.detach() for k, v in sd.items()})
        assert_close(model(x), ref(x), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------- compiled kernels
def _aot_graphs(model, inputs, grad: bool, compare: bool = True) -> dict[str, list[str]]:
    """The call targets of the forward and backward graphs AOTAutograd hands to the compiler (fullgraph); with
    ``compare`` the compiled output equals eager."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    seen = {"forward": [], "backward": []}

    def recorder(kind):
        def compiler(gm, example_inputs):
            seen[kind].extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
            return make_boxed_func(gm.forward)
        return compiler

    compiled = torch.compile(model, fullgraph=True,
                             backend=aot_autograd(fw_compiler=recorder("forward"), bw_compiler=recorder("backward")))
    if grad:
        out = compiled(*inputs)
        out.square().sum().backward()
    else:
        with torch.no_grad():
            out = compiled(*inputs)
    if compare:
        with torch.no_grad():
            assert_close(out, model(*inputs), rtol=1e-10, atol=1e-10)
    return seen


@pytest.mark.parametrize("grad", [True, False], ids=["train", "no_grad"])
@pytest.mark.parametrize("cls, kernel", [(torch.nn.LSTM, "lstm"), (torch.nn.GRU, "gru"), (torch.nn.RNN, "rnn_tanh")])
def test_a_compiled_recurrence_is_one_opaque_kernel_node_not_a_time_loop(cls, kernel, grad):
    """A converted nn.LSTM/GRU/RNN under torch.compile (float64: no oneDNN kernel): the forward graph calls the
    fused kernel as one node ``rpn2c::<kernel>`` (its backward one ``rpn2c::<kernel>_backward``), and the graphs do
    not grow with the sequence length (AOTAutograd's decomposition would unroll T steps, as it does on CUDA)."""
    sizes = {}
    for steps in (3, 12):
        torch.manual_seed(0)
        inner = cls(4, 5, batch_first=True, num_layers=2).double()
        spec = rpn2c.from_torch(inner, (torch.randn(2, steps, 4, dtype=torch.float64),))
        model = rpn2c.compile(spec.text).double().train(grad)
        model.load_state_dict(spec.state_dict)
        seen = _aot_graphs(model, (_rand(2, steps, 4),), grad)
        assert seen["forward"].count(f"rpn2c.{kernel}.default") == 1, seen["forward"]
        assert seen["backward"].count(f"rpn2c.{kernel}_backward.default") == grad, seen["backward"]
        sizes[steps] = (len(seen["forward"]), len(seen["backward"]))
    assert sizes[3] == sizes[12], sizes


def test_compiled_dropout_between_layers_runs_one_opaque_call_per_layer():
    """Training with dropout between layers: the opaque op's recomputing backward could not redraw it, so each
    layer is one op call and the dropout sits between them in the graph (no time loop)."""
    text = _recurrent_text("gru", 3, 4, 3, True, True, False, False, "dropout = 0.5")
    model = rpn2c.compile(text).double()
    seen = _aot_graphs(model.eval(), (_rand(2, 6, 3),), True)
    assert seen["forward"].count("rpn2c.gru.default") == 1  # no dropout in eval mode: one call for all layers
    seen = _aot_graphs(model.train(), (_rand(2, 6, 3),), True, compare=False)
    assert seen["forward"].count("rpn2c.gru.default") == 3, seen["forward"]
    assert seen["backward"].count("rpn2c.gru_backward.default") == 3, seen["backward"]
    assert seen["forward"].count("aten.native_dropout.default") == 2, seen["forward"]


@pytest.mark.parametrize("training, grad, device, train, dropout", [
    (False, True, "meta", True, 0.0),  # an accelerator's kernel differentiated in eval mode: training form
    (False, False, "meta", False, 0.0),
    (False, True, "cpu", False, 0.0),  # CPU keeps the module's mode
    (True, True, "meta", True, 0.5),
    (True, False, "cpu", True, 0.5),
])
def test_the_eager_kernel_runs_its_training_form_where_an_accelerator_must_differentiate_it(
        monkeypatch, training, grad, device, train, dropout):
    """cuDNN refuses the backward of its inference form ("cudnn RNN backward can only be called in training
    mode"): an eval layer on a non-CPU device (meta stands in for CUDA) that needs gradients calls the kernel
    with train=True and dropout 0, the same values; without gradients, or on CPU, the module's own mode."""
    calls = []
    real = torch._VF.lstm

    def spy(*args):
        calls.append(args[5:7])  # (dropout, train)
        return real(*args)

    monkeypatch.setattr(torch._VF, "lstm", spy, raising=False)
    model = rpn2c.compile(_recurrent_text("lstm", 3, 4, 2, False, True, False, False, "dropout = 0.5"))
    model = model.to(device).train(training)
    with torch.set_grad_enabled(grad):
        model(torch.randn(2, 5, 3, device=device))
    assert calls == [(dropout, train)]


def test_an_exported_program_keeps_torch_s_own_kernel():
    """torch.export (and ONNX through it) must load without rpn2c: no opaque op in the exported graph."""
    model = rpn2c.compile(_recurrent_text("gru", 3, 4, 2, True, True, False, False)).eval()
    program = torch.export.export(model, (torch.randn(2, 5, 3),))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert "aten.gru.input" in targets and not any("rpn2c" in t for t in targets), targets


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_an_lstm_under_cpu_autocast_runs_in_float32_where_onednn_lacks_the_dtype(monkeypatch, low, compiled):
    """Where oneDNN has no LSTM in autocast's dtype (bfloat16 without AVX-512), the layer runs in float32 and
    returns the autocast dtype, forced here so that every CPU takes the path: its output is the float32 output
    rounded once, its gradients the float32 ones (the rounding passes gradients through)."""
    from rpn2c.functional import rnn_op

    for dtype in (torch.bfloat16, torch.float16):
        monkeypatch.setitem(rnn_op._ONEDNN_RUNS, dtype, False)
    torch._dynamo.reset()
    model = rpn2c.compile(_recurrent_text("lstm", 3, 4, 2, True, True, False, True))
    x, h0, c0 = torch.randn(2, 5, 3), torch.randn(4, 2, 4), torch.randn(4, 2, 4)
    want = model(x, h0, c0)
    want_grads = torch.autograd.grad(want.sum(), list(model.parameters()))
    run = torch.compile(model, backend="aot_eager", fullgraph=True) if compiled else model
    with torch.autocast("cpu", dtype=low):
        got = run(x, h0, c0)
    assert got.dtype == low
    assert_close(got, want.detach().to(low), rtol=0, atol=0)
    assert_close(torch.autograd.grad(got.float().sum(), list(model.parameters())), want_grads, rtol=1e-6, atol=1e-6)
    torch._dynamo.reset()


def test_an_lstm_runs_under_cpu_bfloat16_autocast_on_any_cpu():
    """The README's suite on a CPU without AVX-512: eager and compiled, with and without gradients."""
    torch._dynamo.reset()
    model = rpn2c.compile(_recurrent_text("lstm", 3, 4, 2, False, True, False, False))
    x = torch.randn(2, 5, 3)
    want = model(x).detach()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    for run in (model, compiled):
        for grad in (False, True):
            with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(grad):
                got = run(x)
            assert got.dtype == torch.bfloat16
            assert_close(got.float(), want, rtol=4e-2, atol=4e-2)  # bfloat16 weights where the CPU has the kernel
    torch._dynamo.reset()


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_compiled_recurrence_under_autocast_computes_in_eager_s_dtype(cell):
    """CPU bfloat16 autocast with gradients: the opaque op is fed what eager autocast feeds the kernel, so the
    compiled output has eager's dtype and values."""
    torch._dynamo.reset()
    model = rpn2c.compile(f"model m {{\n  input x: sequence[B, T, 3]\n  e = head(x) {{ out = 3 }}\n"
                          f"  y = recurrent(e) {{ cell = {cell}  out = 4  layers = 2 }}\n  return y\n}}")
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 5, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = model(x), compiled(x)
    assert got.dtype == want.dtype == torch.bfloat16  # the head's bfloat16 output feeds the layer
    assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    got.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_explain_shows_the_recurrent_form_that_runs_and_its_fallback():
    """The rewritten term's op is the module's one program step; `rpn2c explain` prints the record's fallback."""
    from rpn2c.lower.build import CompiledModel
    from rpn2c.passes import optimize
    from rpn2c.runtime.explain import render_explain

    text = "model r {\n  input x: sequence[B, 5, 4]\n  y = recurrent(x) { cell = lstm  out = 6 }\n  return y\n}\n"
    graph = optimize(rpn2c.check(text))
    shown = render_explain(graph)
    assert "  rewritten  rnn_fused[lstm](input(x))" in shown
    assert "  fallback   rnn_fused ⇢ loop at run time when the sequence length is a symbol" in shown
    assert [s.op for s in CompiledModel(graph).y.program] == ["rnn_fused"]
    off = optimize(rpn2c.check(text), disable={"fused_recurrent", "time_loop"})
    assert [s.op for s in CompiledModel(off).y.program] == ["recur"] and "fallback" not in render_explain(off)
