"""The masked-LM objective of ``rpn2c train --objective mlm`` (seed 001 §6.5 and its footnote 11: 15% of the
tokens, of which 80% become [MASK], 10% a random token and 10% stay): the corruption's rates and ignored labels,
the loss against a hand computation on a fixed mask (unmasked positions contribute nothing), perplexity = exp of
the mean masked cross-entropy, and a run of the shipped ``examples/specs/token_mlm.rpn`` on the generated token
data reporting it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rpn2c.train import mlm
from tests.train.helpers import ROOT, run_cli

SPEC = ROOT / "examples" / "specs" / "token_mlm.rpn"


def test_corruption_rates_and_ignored_labels():
    ids = torch.randint(0, 4, (400, 500), generator=torch.Generator().manual_seed(0))
    inputs, labels = mlm.mask_tokens(ids, 0.15, 4, 5, torch.Generator().manual_seed(1))
    chosen = labels != mlm.IGNORE
    n = ids.numel()
    assert abs(chosen.sum().item() / n - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n)
    assert torch.equal(labels[chosen], ids[chosen])  # a chosen position predicts its original id
    assert torch.equal(inputs[~chosen], ids[~chosen])  # the others are left as they are, and ignored
    k = chosen.sum().item()
    masked = (inputs[chosen] == 4).float().mean().item()
    kept = (inputs[chosen] == ids[chosen]).float().mean().item()
    changed = 1 - masked - kept  # random ids that differ from the original: 0.1 · (V−2)/(V−1)
    tol = 4 * math.sqrt(0.25 / k)
    assert abs(masked - 0.8) < tol and abs(kept - (0.1 + 0.1 / 4)) < tol and abs(changed - 0.1 * 3 / 4) < tol
    assert not (inputs[~chosen] == 4).any() and inputs.max() <= 4
    # the random replacement is uniform over the ids other than [MASK]
    mask_id = 2
    corrupted, _ = mlm.mask_tokens(torch.zeros(20000, dtype=torch.long), 1.0, mask_id, 5,
                                   torch.Generator().manual_seed(3))
    counts = torch.bincount(corrupted, minlength=5).double() / 20000
    assert abs(counts[mask_id] - 0.8) < 0.02 and abs(counts[0] - (0.1 + 0.025)) < 0.015
    assert all(abs(counts[i] - 0.025) < 0.01 for i in (1, 3, 4))


def test_loss_is_the_hand_computed_mean_over_the_masked_positions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[3, -100, -100, 0, -100], [-100, 5, -100, -100, 2]])
    lg = logits.detach().numpy()
    terms = [np.log(np.exp(lg[b, t]).sum()) - lg[b, t, labels[b, t]] for b in range(2) for t in range(5)
             if labels[b, t] >= 0]
    loss = mlm.loss(logits, labels)
    assert_close(loss, torch.tensor(sum(terms) / len(terms), dtype=torch.float64))
    loss.backward()
    assert (logits.grad[labels == -100] == 0).all()  # unmasked positions do not contribute
    changed = logits.detach().clone()
    changed[labels == -100] += 100 * torch.randn_like(changed[labels == -100])
    assert_close(mlm.loss(changed, labels), loss.detach())
    total = mlm.sums(logits.detach(), labels)
    scores = mlm.metrics(total)
    assert_close(torch.tensor(scores["loss"], dtype=torch.float64), loss.detach())
    assert scores["perplexity"] == pytest.approx(math.exp(scores["loss"]), rel=1e-12)
    pred = logits.detach().argmax(-1)
    assert scores["accuracy"] == (pred[labels >= 0] == labels[labels >= 0]).float().mean().item()


def test_train_reports_perplexity_and_eval_reproduces_it(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", SPEC, "--data", "majority", "--objective", "mlm", "--epochs", "1",
                           "--out", out, "--quiet")
    assert code == 0, err
    summary = json.loads((out / "metrics.json").read_text())
    test, last = summary["test"], summary["history"][-1]
    assert test["perplexity"] == pytest.approx(math.exp(test["loss"]), rel=1e-9)
    assert last["val_perplexity"] == pytest.approx(math.exp(last["val_loss"]), rel=1e-9)
    assert 1 < test["perplexity"] < 5  # 4 real ids: a model no better than chance scores about 4
    code, text, err = run_cli(capsys, "eval", SPEC, out / "checkpoint.pt", "--format", "json")
    assert code == 0, err
    assert json.loads(text)["metrics"]["perplexity"] == pytest.approx(test["perplexity"], rel=1e-9)


@pytest.mark.parametrize("spec, extra, says", [
    ("token_transformer.rpn", [], "needs one row of logits per token"),
    ("token_mlm.rpn", ["--mask-id", "2"], "without the [MASK] id"),
])
def test_specs_and_data_that_do_not_fit_are_refused(tmp_path, capsys, spec, extra, says):
    code, _, err = run_cli(capsys, "train", ROOT / "examples" / "specs" / spec, "--data", "majority", "--objective",
                           "mlm", "--epochs", "1", "--out", tmp_path / "run", "--quiet", *extra)
    assert code == 1 and says in err, err


def test_predict_fills_the_masked_tokens_as_eval_scores_them(tmp_path, capsys):
    """``rpn2c predict`` on a masked-LM checkpoint: with --data, one row per token eval masks (the same fixed
    masks: the rows' accuracy is eval's), each the arg max of the model's logits there; with --input, every
    [MASK] id of the user's ids is filled, with the same prediction the split's rows give at those positions."""
    import csv
    import io

    from rpn2c import data

    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", SPEC, "--data", "majority", "--objective", "mlm", "--epochs", "1",
                           "--out", out, "--quiet")
    assert code == 0, err
    ckpt = out / "checkpoint.pt"
    code, text, err = run_cli(capsys, "predict", SPEC, ckpt, "--data", "majority")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["index", "position", "input", "target", "prediction", "probability"]
    code, scored, err = run_cli(capsys, "eval", SPEC, ckpt, "--format", "json")
    metrics = json.loads(scored)["metrics"]
    assert {int(r["index"]) for r in rows} <= set(range(json.loads(scored)["n"]))
    hits = sum(r["prediction"] == r["target"] for r in rows)
    assert hits / len(rows) == pytest.approx(metrics["accuracy"], abs=1e-12)
    assert all(0 < float(r["probability"]) <= 1 for r in rows)
    # the same masked split handed over as a file: its [MASK] positions are filled as above
    config = torch.load(ckpt, weights_only=False)["config"]
    ids = data.load("majority", seed=config["seed"]).test[0]
    vocab, mask_id = 5, 4  # token_mlm.rpn: 4 ids and [MASK] = V − 1
    inputs, labels = mlm.evaluation_split(ids, config["mask_rate"], mask_id, vocab, config["eval_batch_size"])
    np.save(tmp_path / "ids.npy", inputs.numpy())
    code, text, err = run_cli(capsys, "predict", SPEC, ckpt, "--input", tmp_path / "ids.npy")
    assert code == 0, err
    filled = list(csv.DictReader(io.StringIO(text)))
    masked = [r for r in rows if r["input"] == str(mask_id)]
    assert len(filled) == int((inputs == mask_id).sum()) == len(masked) > 0
    assert [(r["index"], r["position"], r["prediction"]) for r in filled] == [
        (r["index"], r["position"], r["prediction"]) for r in masked]
    assert all(float(a["probability"]) == pytest.approx(float(b["probability"]), abs=1e-6)
               for a, b in zip(filled, masked))
