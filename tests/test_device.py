"""Device-following: compiled specs run where their inputs and parameters are.

On CPU the ``meta`` device stands in for an accelerator: a tensor made inside ``forward`` without the input's
device (a CPU constant, a mask, an index) meets meta tensors and fails. The ``gpu`` tests (skipped without CUDA,
deselected by ``-m "not gpu"``) run every model of every shipped spec (``specs/``, ``specs/paper/``,
``examples/specs/``) on CUDA against CPU in float64 and through inductor against eager with TF32 off, train the
backbones under bfloat16 autocast against float32, and check that a compiled recurrence is one cuDNN call.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.runtime.export_cli import example_inputs
from tests.test_torch_compile import IDS, MODELS, random_inputs

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").glob("*.rpn")) + sorted((ROOT / "examples" / "specs").glob("*.rpn"))
DATA_DEPENDENT = {  # what reads values, not only shapes: cannot run on meta tensors
    "gat_nodes": "the edge softmax drops listed self-loops (nonzero)",
    **{name: "token ids are range-checked (item)"
       for name in ("token_transformer", "llama", "gpt2", "bert", "t5_encoder", "mamba_lm", "token_mlm")},
}
BACKBONES = ("cnn", "rnn", "gcn", "transformer", "mlp")
FLOAT32_ANGLES = {p.stem for d in (ROOT / "specs", ROOT / "specs" / "paper", ROOT / "examples" / "specs")
                  for p in d.glob("*.rpn") if "rotary" in p.read_text(encoding="utf-8")}


def _model_and_inputs(path, dtype=torch.float32):
    model = rpn2c.compile_file(path).to(dtype).eval()
    values, _ = example_inputs(model.graph, dtype=dtype)
    return model, values


@pytest.mark.parametrize("path", [p for p in SPECS if p.stem not in DATA_DEPENDENT], ids=lambda p: p.stem)
def test_specs_follow_the_device_of_their_inputs(path):
    model, values = _model_and_inputs(path)
    with torch.no_grad():
        want = model(*values)
        got = model.to("meta")(*[v.to("meta") for v in values])
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        assert g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype


def test_the_meta_check_catches_a_constant_made_on_the_cpu():
    """The guard above can fail: a forward that adds a CPU tensor to a meta one raises."""
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.ones(3, device="meta") + torch.ones(3)


# ------------------------------------------------------------------------------------------------ CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DEVICE = "cuda"
BF16_BACKBONES = ("cnn", "rnn", "lstm", "gcn", "transformer")  # lstm: rnn.rpn with cell = lstm


@pytest.fixture
def no_tf32():
    """Full float32 matmuls and convolutions (cuDNN's RNNs and convolutions default to TF32, ~1e-3 relative)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _spec_model(path, model, dtype):
    """A spec file's model and its random inputs (tests/test_torch_compile's sizes), in ``dtype``, eval mode."""
    text = path.read_text(encoding="utf-8")
    torch.manual_seed(0)
    module = rpn2c.compile(text, str(path), model=model, path=path).to(dtype).eval()
    values = [v.to(dtype) if v.is_floating_point() else v for v in random_inputs(module.graph)]
    return module, values


def _outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _loss(outputs) -> torch.Tensor:
    return sum(o.square().mean() for o in outputs if o.is_floating_point())


def _assert_step_matches(got_model, want_model, got_values, want_values, out_tol, grad_tol, grad_scale=0.0):
    """One forward and backward of each: equal outputs and parameter gradients (compared on the CPU). A gradient's
    absolute tolerance grows by ``grad_scale`` times its largest entry: float32 sums over many items (a sum pool
    over 512 tokens) reach 1e4 and reassociate to ~1e-3 absolute, far above ``atol`` at the entries near 0."""
    want, got = _outputs(want_model(*want_values)), _outputs(got_model(*got_values))
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert_close(g.cpu(), w.cpu(), **out_tol)
    want_loss, got_loss = _loss(want), _loss(got)
    assert got_loss.requires_grad == want_loss.requires_grad
    if not want_loss.requires_grad:  # nothing trained reaches the output (a Hebbian or parameter-free Hopfield net)
        return
    want_loss.backward()
    got_loss.backward()
    for (name, p), q in zip(got_model.named_parameters(), want_model.parameters()):
        if q.grad is not None:
            assert p.grad is not None, name
            want_grad = q.grad.cpu()
            tol = dict(grad_tol, atol=grad_tol["atol"] + grad_scale * float(want_grad.abs().max()))
            assert_close(p.grad.cpu(), want_grad, **tol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("path, model", MODELS, ids=IDS)
@pytest.mark.gpu
@cuda
def test_specs_on_cuda_equal_cpu_in_outputs_and_gradients(path, model):
    """Every shipped spec in float64, eval mode (no dropout draw): the CUDA module equals the CPU one. Recurrent
    layers are differentiated in eval mode too (cuDNN's training form with dropout 0). Rotary angles and their
    cosines are float32 in every dtype (docs/semantics.md, as the libraries compute them): CUDA's float32 sin/cos
    differ from the CPU's in the last bit (~6e-8 relative), so those specs are held to float32's precision."""
    cpu, values = _spec_model(path, model, torch.float64)
    gpu_model = copy.deepcopy(cpu).to(DEVICE)
    tol = ({"rtol": 1e-5, "atol": 1e-6}, {"rtol": 1e-4, "atol": 1e-6}) if path.stem in FLOAT32_ANGLES else \
        ({"rtol": 1e-7, "atol": 1e-9}, {"rtol": 1e-6, "atol": 1e-8})
    _assert_step_matches(gpu_model, cpu, [v.to(DEVICE) for v in values], values, *tol)


@pytest.mark.parametrize("path, model", MODELS, ids=IDS)
@pytest.mark.gpu
@cuda
def test_specs_compile_with_inductor_on_cuda(path, model, no_tf32):
    """Every shipped spec through inductor (fullgraph) on CUDA in float32, TF32 off on both sides: outputs and
    parameter gradients equal eager's up to float32 reassociation."""
    torch._dynamo.reset()
    eager, values = _spec_model(path, model, torch.float32)
    eager.to(DEVICE)
    compiled = copy.deepcopy(eager)
    values = [v.to(DEVICE) for v in values]
    _assert_step_matches(torch.compile(compiled, fullgraph=True), eager, values, values,
                         {"rtol": 1e-4, "atol": 1e-5}, {"rtol": 1e-3, "atol": 1e-5}, grad_scale=1e-5)


def _backbone(name):
    if name == "lstm":
        text = (ROOT / "specs" / "rnn.rpn").read_text(encoding="utf-8").replace("cell = gru", "cell = lstm")
        return ROOT / "specs" / "rnn.rpn", text
    path = ROOT / "specs" / f"{name}.rpn"
    return path, path.read_text(encoding="utf-8")


def _bf16_losses(model, values, target, steps, low):
    """Losses of ``steps`` SGD steps, under bfloat16 autocast when ``low``."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=low):
            out = _outputs(model(*values))[0]
        loss = (out.float() - target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "inductor"])
@pytest.mark.parametrize("name", BF16_BACKBONES)
@pytest.mark.gpu
@cuda
def test_backbones_train_under_bf16_autocast_close_to_float32(name, compiled, no_tf32):
    """Three SGD steps of each backbone (eval mode: no dropout draw) under bfloat16 autocast: every loss is finite
    and within 5 % of the float32 run's (bfloat16 keeps 8 mantissa bits, ~0.4 % per rounding)."""
    torch._dynamo.reset()
    path, text = _backbone(name)
    torch.manual_seed(0)
    base = rpn2c.compile(text, str(path), path=path).to(DEVICE).eval()
    values = [(v.float() if v.is_floating_point() else v).to(DEVICE) for v in random_inputs(base.graph)]
    with torch.no_grad():
        target = torch.randn_like(_outputs(base(*values))[0].float())
    runs = []
    for low in (False, True):
        model = copy.deepcopy(base)
        runs.append(_bf16_losses(torch.compile(model, fullgraph=True) if compiled else model, values, target, 3, low))
    full, half = runs
    assert all(math.isfinite(v) for v in half), half
    for f, h in zip(full, half):
        assert h == pytest.approx(f, rel=5e-2, abs=1e-4), (full, half)


@pytest.mark.parametrize("cls, kernel", [(torch.nn.LSTM, "lstm"), (torch.nn.GRU, "gru"), (torch.nn.RNN, "rnn_tanh")])
@pytest.mark.gpu
@cuda
def test_a_compiled_recurrence_on_cuda_is_one_cudnn_call_not_a_time_loop(cls, kernel, no_tf32):
    """A converted nn.LSTM/GRU/RNN compiled on CUDA: one ``rpn2c::<kernel>`` node (cuDNN inside) in the forward
    graph and one backward node, the same graphs for 4 and 64 steps; inductor equals nn.<cell> in outputs and
    weight gradients."""
    from tests.test_recurrent import _aot_graphs

    sizes = {}
    for steps in (4, 64):
        torch.manual_seed(0)
        inner = cls(16, 32, batch_first=True, num_layers=2).to(DEVICE)
        x = torch.randn(3, steps, 16, device=DEVICE)
        spec = rpn2c.from_torch(inner, (x,))
        model = rpn2c.compile(spec.text).to(DEVICE)
        model.load_state_dict(spec.state_dict)
        seen = _aot_graphs(model.double(), (x.double(),), True)
        assert seen["forward"].count(f"rpn2c.{kernel}.default") == 1, seen["forward"]
        assert seen["backward"].count(f"rpn2c.{kernel}_backward.default") == 1, seen["backward"]
        sizes[steps] = (len(seen["forward"]), len(seen["backward"]))
    assert sizes[4] == sizes[64], sizes
    torch._dynamo.reset()
    model.float().zero_grad()
    compiled = torch.compile(model, fullgraph=True)
    y = compiled(x)
    assert_close(y, inner(x)[0], rtol=1e-5, atol=1e-6)
    y.square().sum().backward()
    inner(x)[0].square().sum().backward()
    for name, p in inner.named_parameters():
        assert_close(model.get_parameter(f"rnn.{name}").grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
