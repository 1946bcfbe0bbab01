"""The benchmark harness: paired ABBA ratios on fake timers, workload equality at --quick sizes, the CLI, FLOP
counts and the GPU profile's workloads at tiny sizes.

No timing is asserted: speed is measured by ``python -m benchmarks``, never tested.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks import workloads as W  # noqa: E402


class FakeClock:
    """A timer that advances only when a fake workload 'runs'."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, cost):
        def fn():
            self.now += cost
        return fn


def test_abba_ratio_is_exact_on_constant_costs():
    clock = FakeClock()
    pairs = harness.abba(clock.work(3.0), clock.work(1.5), rounds=5, number=4, timer=clock)
    assert len(pairs) == 5
    assert all(a == pytest.approx(3.0) and b == pytest.approx(1.5) for a, b in pairs)
    s = harness.summarize(pairs)
    assert s["ratio"] == pytest.approx(2.0) and s["q25"] == pytest.approx(2.0) and s["q75"] == pytest.approx(2.0)
    assert s["spec_ms"] == pytest.approx(3000.0) and s["hand_ms"] == pytest.approx(1500.0)


def test_abba_order_cancels_linear_drift():
    # cost grows linearly with the clock: A B B A puts A and B at the same mean time within a round
    slot = []
    clock = FakeClock()

    def fn_a():
        slot.append("A")
        clock.now += 1.0

    def fn_b():
        slot.append("B")
        clock.now += 1.0

    harness.abba(fn_a, fn_b, rounds=2, number=1, timer=clock)
    assert "".join(slot) == "ABBAABBA"

    # a per-slot cost of c·(1 + k·slot_index): the round's sums over slots {0, 3} and {1, 2} are equal
    class SlotClock:
        def __init__(self):
            self.now, self.i = 0.0, 0

        def __call__(self):
            return self.now

        def work(self, c):
            def fn():
                self.now += c * (1 + 0.5 * self.i)
                self.i += 1
            return fn

    sc = SlotClock()
    pairs = harness.abba(sc.work(2.0), sc.work(1.0), rounds=3, number=1, timer=sc)
    for a, b in pairs:
        assert a / b == pytest.approx(2.0)


def test_summarize_median_and_spread_of_per_round_ratios():
    pairs = [(1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0), (10.0, 1.0)]
    s = harness.summarize(pairs)
    assert s["ratio"] == 3.0 and s["q25"] == 2.0 and s["q75"] == 4.0
    assert harness.quantile([1.0, 2.0], 0.5) == 1.5


def test_calibrate_reaches_min_time():
    clock = FakeClock()
    assert harness.calibrate(clock.work(0.001), 0.01, timer=clock) == 16


@pytest.mark.parametrize("name", ["lenet", "chebyshev", "taylor", "causal-attn"])
def test_quick_workloads_match_the_hand_written_module(name):
    w = W.WORKLOADS[name]
    pair = w.build(W.sizes_for(w, quick=True))
    assert W.check_equal(pair, w.tol) < 1e-8


def test_check_equal_catches_a_wrong_weight():
    w = W.WORKLOADS["chebyshev"]
    pair = w.build(W.sizes_for(w, quick=True))
    with torch.no_grad():
        pair.hand.conv.weight[0, 0, 0, 0] += 1.0
    with pytest.raises(AssertionError, match="differ"):
        W.check_equal(pair)


def test_cli_parses_and_selects():
    args = harness.parse_args(["--workload", "lenet,taylor", "--workload", "lstm", "--compile", "--backend", "eager",
                               "--device", "cpu", "--dtype", "bfloat16", "--quick", "--json", "out.json",
                               "--markdown", "--size", "batch=3"])
    assert args.compile and args.backend == "eager" and args.dtype == "bfloat16" and args.quick and args.markdown
    assert args.threads == 2 and args.rounds == 4 and args.json == "out.json"
    assert [w.name for w in harness.selected(args)] == ["lenet", "taylor", "lstm"]
    assert harness.parse_sizes(args.size) == {"batch": 3}
    assert W.sizes_for(W.WORKLOADS["lenet"], True, {"batch": 3, "T": 9}) == {"batch": 3}
    quick = harness.selected(harness.parse_args(["--quick"]))
    assert "gcn-2m" not in [w.name for w in quick] and "build-100" in [w.name for w in quick]
    assert "gcn-2m" in [w.name for w in harness.selected(harness.parse_args([]))]
    with pytest.raises(SystemExit):
        harness.parse_args(["--dtype", "float16"])
    with pytest.raises(SystemExit):
        harness.selected(harness.parse_args(["--workload", "nope"]))
    cmd = harness.memory_args(W.WORKLOADS["lenet"], "spec", args)
    assert cmd[1:5] == ["-m", "benchmarks.memory", "lenet", "spec"] and "--quick" in cmd and "--compile" in cmd


def test_markdown_table_from_rows():
    stat = {"ratio": 1.25, "q25": 1.1, "q75": 1.4, "spec_ms": 2.0, "hand_ms": 1.6}
    rows = [{"workload": "x", "title": "x (B=1)", "mode": "eager", "fwd": stat, "fwd_bwd": stat,
             "memory": {"ratio": 0.9}, "note": "a note"},
            {"workload": "y", "title": "y", "mode": "-", "note": "", "skipped": "needs 9 GiB"},
            {"workload": "b", "title": "build", "mode": "-", "note": "", "check_ms": 12.0, "compile_ms": 30.0}]
    md = harness.markdown(rows)
    assert "| x (B=1) | 1.25 | 1.10–1.40 | 1.25 | 1.10–1.40 | 2.00 / 1.60 | — | — | 0.90 | eager |" in md
    assert "skipped: needs 9 GiB" in md and "| build | 12.0 | 30.0 |" in md and "- x: a note" in md


# ------------------------------------------------------------------------------------------------ GPU profile
def test_flop_count_of_a_linear_training_step():
    b, n_in, n_out = 5, 12, 7
    lin = torch.nn.Linear(n_in, n_out)
    x = torch.randn(b, n_in)
    # forward 2·B·in·out, backward the same for the weight's gradient and for the input's: 6·B·in·out
    assert harness.count_flops(lin, (x.requires_grad_(),)) == 6 * b * n_in * n_out
    assert harness.count_flops(lin, (x.detach(),)) == 4 * b * n_in * n_out  # no input gradient


def test_flop_count_of_a_fused_lstm_is_that_of_its_matrix_products():
    # oneDNN's (and cuDNN's) fused LSTM kernel has no FLOP formula: a real step counts 0; the meta copy runs the
    # decomposed layer, as the CPU does with oneDNN off
    b, t, h = 5, 3, 8
    rnn = W._Call(torch.nn.LSTM(h, h, batch_first=True), lambda m, x: m(x)[0])
    x = torch.randn(b, t, h)
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as decomposed:
        harness.step_fns(rnn, (x,))[1]()
    unit = 2 * b * 4 * h * h  # one [B, h] x [h, 4h] product
    # forward: t input and t hidden products; backward: both weight gradients (2t), the hidden state's (t - 1)
    assert harness.count_flops(rnn, (x,)) == decomposed.get_total_flops() == (5 * t - 1) * unit


class _GroupedAttention(torch.nn.Module):
    """Causal self-attention on given q, k, v with fewer key/value heads (grouped-query), as Llama calls it."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


@given(st.integers(1, 3), st.sampled_from([(4, 1), (4, 2), (6, 3), (4, 4)]), st.integers(1, 9), st.integers(1, 9),
       st.integers(1, 8), st.integers(1, 8))
def test_fused_attention_flops_count_the_query_s_heads_of_grouped_queries(b, heads, s_q, s_k, d, d_v):
    """The formulas equal torch's own where torch has one for the shapes (torch 2.13 takes grouped queries; 2.11,
    on the last GPU window, refused them), and count what a fused kernel runs: every query head's scores."""
    from torch.utils import flop_counter as fc

    h, g = heads
    q, k, v, out = (b, h, s_q, d), (b, g, s_k, d), (b, g, s_k, d_v), (b, h, s_q, d_v)
    assert harness.sdpa_flops(q, k, v) == 2 * b * h * s_q * s_k * (d + d_v)
    try:
        want = fc.sdpa_flop_count(q, k, v), fc.sdpa_backward_flop_count(out, q, k, v)
    except AssertionError:  # a torch that refuses grouped-query shapes
        assert g < h
        return
    assert (harness.sdpa_flops(q, k, v), harness.sdpa_backward_flops(out, q, k, v)) == want


def test_a_grouped_query_training_step_is_counted_where_torch_counts_nothing_or_refuses(monkeypatch):
    """The CPU's fused attention kernel has no FLOP formula in torch (a real step counts 0), and torch before 2.13
    refuses grouped-query shapes: the benchmark's count takes the formulas above in either case. The module fails
    on the meta device (a data-dependent branch), so a real step is counted."""
    from torch.utils import flop_counter as fc

    b, h, g, t, d = 2, 8, 2, 16, 4
    q, k, v = (torch.randn(b, n, t, d, requires_grad=True) for n in (h, g, g))
    with FlopCounterMode(display=False) as plain:
        harness.step_fns(_GroupedAttention(), (q, k, v))[1]()
    assert plain.get_total_flops() == 0  # torch's own count of the CPU kernel

    def refuses(*args, **kwargs):
        raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")  # torch 2.11's message

    for op in harness.SDPA_FLOPS:
        monkeypatch.setitem(fc.flop_registry, op, refuses)
    monkeypatch.setattr(torch.Tensor, "to", _no_meta(torch.Tensor.to))
    fwd, bwd = 2 * b * h * t * t * (d + d), 2 * b * h * t * t * (3 * d + 2 * d)
    assert harness.count_flops(_GroupedAttention(), (q, k, v)) == fwd + bwd


def _no_meta(to):
    """``Tensor.to`` that refuses the meta device: a module the meta copy cannot run."""

    def wrapped(self, *args, **kwargs):
        if any(str(a) == "meta" for a in (*args, *kwargs.values())):
            raise NotImplementedError("no meta")
        return to(self, *args, **kwargs)

    return wrapped


def test_throughput_and_peak_columns():
    stat = {"ratio": 2.0, "q25": 2.0, "q75": 2.0, "spec_ms": 2.0, "hand_ms": 1.0}
    row = {"workload": "x", "title": "x", "mode": "eager + autocast bf16", "note": "", "fwd": stat,
           "fwd_bwd": stat, "flops": 4e12}
    harness.throughput(row, 1000.0)
    assert row["tflops"] == {"spec": pytest.approx(2000.0), "hand": pytest.approx(4000.0)}
    assert row["peak_pct"] == {"spec": pytest.approx(200.0), "hand": pytest.approx(400.0)}
    cpu = {k: v for k, v in row.items() if k not in ("tflops", "peak_pct")} | {"title": "y"}
    harness.throughput(cpu, None)  # no peak known: TFLOP/s only
    assert cpu["tflops"] == row["tflops"] and "peak_pct" not in cpu
    md = harness.markdown([row, cpu])
    assert "| fwd+bwd TFLOP/s (rpn2c / hand) | % of bf16 peak (rpn2c / hand) |" in md
    assert "| x | 2.00 | 2.00–2.00 | 2.00 | 2.00–2.00 | 2.00 / 1.00 | 2e+03 / 4e+03 | 200.0 / 400.0 | — |" in md
    assert "| y | 2.00 | 2.00–2.00 | 2.00 | 2.00–2.00 | 2.00 / 1.00 | 2e+03 / 4e+03 | — | — |" in md
    assert "TFLOP/s 2e+03 / 4e+03 (200.0 / 400.0 % of peak)" in harness.line(row)
    assert harness.peak_for("NVIDIA H100 80GB HBM3") == 989.0 and harness.peak_for("NVIDIA H100 PCIe") == 756.0
    assert harness.peak_for("NVIDIA H200") == 989.0 and harness.peak_for("NVIDIA A100-SXM4-80GB") == 312.0
    assert harness.peak_for("NVIDIA GeForce RTX 4090") is None
    assert harness.peak_tflops(harness.parse_args([])) is None  # CPU: TFLOP/s only
    assert harness.peak_tflops(harness.parse_args(["--peak-tflops", "500"])) == 500.0


GPU = ["transformer-4x1024", "resnet18-b128", "lstm-2x512", "gcn-2m", "llama-12x768", "lm", "lm-nanogpt"]


def test_gpu_profile_selection():
    assert sorted(w.name for w in harness.selected(harness.parse_args(["--profile", "gpu"]))) == sorted(GPU)
    assert sorted(w.name for w in harness.selected(harness.parse_args(["--profile", "gpu", "--quick"]))) == sorted(GPU)
    default = [w.name for w in harness.selected(harness.parse_args([]))]
    assert not set(default) & (set(GPU) - {"gcn-2m"})
    full = W.WORKLOADS["transformer-4x1024"].sizes
    assert (full["layers"], full["d"], full["heads"], full["ffn"], full["batch"], full["T"]) == (4, 1024, 16, 4096, 16,
                                                                                                  1024)
    assert W.WORKLOADS["resnet18-b128"].sizes["batch"] == 128 and W.WORKLOADS["gcn-2m"].sizes["edges"] == 20_000_000
    assert W.WORKLOADS["lstm-2x512"].sizes == {"batch": 64, "T": 256, "H": 512, "layers": 2}
    gpt2_small = {"batch": 8, "T": 1024, "d": 768, "heads": 12, "layers": 12, "vocab": 50257}
    assert W.WORKLOADS["lm"].sizes == W.WORKLOADS["lm-nanogpt"].sizes == gpt2_small
    assert W.WORKLOADS["lm"].quick == {"batch": 2, "T": 32, "d": 64, "heads": 4, "layers": 2, "vocab": 256}
    args = harness.parse_args(["--profile", "gpu", "--quick", "--no-autocast"])
    assert "--no-autocast" in harness.memory_args(W.WORKLOADS["lstm-2x512"], "spec", args)
    assert harness.amp_dtype(W.WORKLOADS["lstm-2x512"], args) is None
    assert harness.amp_dtype(W.WORKLOADS["lstm-2x512"], harness.parse_args([])) is torch.bfloat16


def _torch_lstm_lacks(amp) -> bool:
    """torch's own CPU LSTM cannot run under ``amp`` autocast here (oneDNN without bfloat16: no AVX-512)."""
    from rpn2c.functional import rnn_op

    return rnn_op.cpu_fallback("lstm", "cpu", torch.float32, amp) is not None


def _step(module, ins, amp):
    """One training step of ``module`` as timed (bf16 autocast where marked); gradients cleared after."""
    module.train()
    _, step = harness.step_fns(module, ins, amp, "cpu")
    step()
    assert all(p.grad is None for p in module.parameters())


@pytest.mark.parametrize("name", GPU)
def test_gpu_workloads_match_and_step_at_tiny_sizes(name):
    w = W.WORKLOADS[name]
    pair = w.build(W.sizes_for(w, quick=True))
    assert W.check_equal(pair, w.tol) < min(w.tol, 1e-8 if w.tol <= 1e-8 else w.tol / 10)
    amp = harness.amp_dtype(w, harness.parse_args(["--profile", "gpu", "--quick"]))
    spec, hand, ins = harness._prepare(pair, "cpu", torch.float32)
    assert harness.count_flops(hand.train(), ins) > 0
    _step(spec, ins, amp)  # rpn2c's LSTM runs in float32 where oneDNN lacks bfloat16
    if not (name.startswith("lstm") and _torch_lstm_lacks(amp)):
        _step(hand, ins, amp)  # else: test_torch_s_lstm_steps_under_cpu_autocast, skipped


@pytest.mark.skipif(_torch_lstm_lacks(torch.bfloat16),
                    reason="torch's nn.LSTM under CPU bfloat16 autocast needs oneDNN's bfloat16 (AVX-512)")
def test_torch_s_lstm_steps_under_cpu_autocast():
    """The lstm-2x512 workload's hand-written side (nn.LSTM) as timed, where the CPU can run it."""
    w = W.WORKLOADS["lstm-2x512"]
    _, hand, ins = harness._prepare(w.build(W.sizes_for(w, quick=True)), "cpu", torch.float32)
    _step(hand, ins, harness.amp_dtype(w, harness.parse_args(["--profile", "gpu", "--quick"])))


def test_kernel_counts_of_a_step_are_deterministic_and_fewer_for_packed_attention(tmp_path, capsys):
    """``python -m benchmarks.kernels``: one profiled training step per side; the converted encoder layer (packed
    heads, one SDPA) launches fewer top-level operators than nn.TransformerEncoderLayer, the same count twice."""
    import json

    from benchmarks import kernels

    out = tmp_path / "k.json"
    assert kernels.main(["--quick", "--workload", "transformer", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert 0 < row["rpn2c"] < row["hand"]
    assert f"| {row['rpn2c']} | {row['hand']} |" in capsys.readouterr().out
    pair = W.WORKLOADS["lstm"].build(W.sizes_for(W.WORKLOADS["lstm"], True))
    (x,) = pair.inputs(False)
    assert kernels.count_step(pair.hand, (x,), "cpu") == kernels.count_step(pair.hand, (x,), "cpu")
