"""The language-model workloads: the nanoGPT-style anchor equals specs/gpt2.rpn and GPT2LMHeadModel, a timed
training step (next-token cross-entropy + AdamW) moves the spec and the anchor alike, and the FLOP formula
6·N·tokens + 12·L·d·T·tokens agrees with the parameter count and with FlopCounterMode."""

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks import harness  # noqa: E402
from benchmarks import lm as LM  # noqa: E402
from benchmarks import workloads as W  # noqa: E402

QUICK = W.WORKLOADS["lm"].quick


@pytest.fixture(scope="module")
def nanogpt_pair():
    return W.WORKLOADS["lm-nanogpt"].build(QUICK)


def test_both_anchors_equal_the_spec_in_float64(nanogpt_pair):
    assert W.check_equal(nanogpt_pair, 1e-10) < 1e-10
    assert W.check_equal(W.WORKLOADS["lm"].build(QUICK), 1e-10) < 1e-10


def test_a_wrong_conv1d_layout_is_caught(nanogpt_pair):
    pair = copy.copy(nanogpt_pair)
    pair.hand = copy.deepcopy(pair.hand)
    with torch.no_grad():  # a square c_proj weight left in GPT-2's Conv1D layout (not transposed) loads, but differs
        w = pair.hand.transformer.h[0].attn["c_proj"].weight
        w.copy_(w.t().clone())
    with pytest.raises(AssertionError, match="differ"):
        W.check_equal(pair)


def test_one_training_step_moves_spec_and_anchor_alike(nanogpt_pair):
    """Forward, cross-entropy on the next token, backward and one AdamW step, in float64: the updated weights
    still compute the same logits, and they changed."""
    spec, hand = (copy.deepcopy(m).double().train() for m in (nanogpt_pair.spec, nanogpt_pair.hand))
    (ids,) = nanogpt_pair.inputs(False)
    before = hand(ids).detach()
    for m in (spec, hand):
        _, step = harness.step_fns(m, (ids,), None, "cpu", LM.next_token_loss, optimizer=True)
        step()
        assert step.optimizer is not None and all(p.grad is None for p in m.parameters())
    after = hand(ids).detach()
    assert (after - before).abs().max() > 1e-6
    torch.testing.assert_close(spec(ids), after, rtol=0, atol=1e-10)
    assert hand.lm_head.weight is hand.transformer.wte.weight  # still tied


def test_flop_formula_counts_the_parameters_and_matches_the_flop_counter(nanogpt_pair):
    s = QUICK
    hand = nanogpt_pair.hand
    n = sum(p.numel() for p in hand.parameters()) - hand.transformer.wpe.weight.numel()
    tokens = s["batch"] * s["T"]
    assert LM.train_flops(s) == nanogpt_pair.flops == 6 * n * tokens + 12 * s["layers"] * s["d"] * s["T"] * tokens
    (ids,) = nanogpt_pair.inputs(False)
    counted = harness.count_flops(hand.train(), (ids,))
    # the counter sees the matrix products and attention only: the biases' and LayerNorms' 6·n share is missing
    assert 0.97 * LM.train_flops(s) < counted <= LM.train_flops(s)
    assert nanogpt_pair.tokens == tokens


def test_throughput_reports_tokens_per_second():
    stat = {"ratio": 0.5, "q25": 0.5, "q75": 0.5, "spec_ms": 100.0, "hand_ms": 200.0}
    row = {"workload": "lm", "title": "lm", "mode": "eager", "note": "", "fwd_bwd": stat, "flops": 1e12,
           "tokens": 8192}
    harness.throughput(row, None)
    assert row["tokens_per_s"] == {"spec": pytest.approx(81920.0), "hand": pytest.approx(40960.0)}
    assert "tokens/s 8.192e+04 / 4.096e+04" in harness.line(row)
    assert "- lm (eager): tokens/s 81,920 / 40,960 (rpn2c / hand)" in harness.markdown([row])


def test_cuda_step_memory_adds_what_the_side_holds(monkeypatch):
    """The in-process CUDA peak (faked allocator counters here): the steps' increase plus the parameters, buffers
    and AdamW state (two moments and a step count per parameter) the side holds between steps."""
    lin = torch.nn.Linear(4, 3)
    lin.register_buffer("scale", torch.ones(5))
    _, step = harness.step_fns(lin, (torch.randn(2, 4),), None, "cpu", optimizer=True)
    step()
    counters = {"now": 1000, "peak": 0}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: counters["now"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: counters.update(peak=counters["now"]))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: counters["peak"] + 256)
    got = harness.cuda_step_memory(lin, step)
    params = (12 + 3 + 5) * 4  # weight, bias, buffer (float32)
    adam = 2 * (12 + 3) * 4 + 2 * 4  # exp_avg, exp_avg_sq, and a float32 step per parameter
    assert got == {"baseline_bytes": params + adam, "delta_bytes": 256, "peak_bytes": params + adam + 256}
    ratios = harness.memory_ratios(got, {**got, "delta_bytes": 128, "peak_bytes": params + adam + 128})
    assert ratios["ratio"] == 2.0 and ratios["peak_ratio"] == pytest.approx((params + adam + 256) / (params + adam + 128))
