"""The benchmark harness: paired ABBA ratios on fake timers, workload equality at --quick sizes, the CLI.

No timing is asserted: speed is measured by ``python -m benchmarks``, never tested.
"""

import pytest

torch = pytest.importorskip("torch")

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
    assert "| x (B=1) | 1.25 | 1.10–1.40 | 1.25 | 1.10–1.40 | 2.00 / 1.60 | 0.90 | eager |" in md
    assert "skipped: needs 9 GiB" in md and "| build | 12.0 | 30.0 |" in md and "- x: a note" in md
