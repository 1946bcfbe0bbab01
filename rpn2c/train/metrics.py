"""Evaluation metrics by task, computed in float64 from model outputs and targets (once per evaluation).

classification / node_classification (``output`` = logits ``[n, K]`` or labels ``[n]``):
  accuracy = mean(ŷ = y);  macro_f1 = mean over classes present in y ∪ ŷ of 2·tp / (2·tp + fp + fn)
  (a class with 2·tp + fp + fn = 0 cannot occur among present classes; this is scikit-learn's
  ``f1_score(average="macro")``).
regression (``output``, ``target`` ``[n]`` or ``[n, k]``), averaged uniformly over the k outputs:
  mse = mean((ŷ - y)²);  mae = mean(|ŷ - y|);  r2 = 1 - Σ(y - ŷ)² / Σ(y - ȳ)², with a constant target giving
  1 when predicted exactly and 0 otherwise (scikit-learn's ``r2_score``).
"""

from __future__ import annotations

import torch

# the metric shown in progress bars and curves, and whether larger is better
PRIMARY: dict[str, tuple[str, bool]] = {
    "classification": ("accuracy", True),
    "node_classification": ("accuracy", True),
    "regression": ("r2", True),
}
NAMES: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1"),
    "node_classification": ("accuracy", "macro_f1"),
    "regression": ("mse", "mae", "r2"),
}


def accuracy(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Fraction of ``pred == target`` (labels)."""
    if target.numel() == 0:
        return float("nan")
    return float((pred == target).to(torch.float64).mean())


def confusion_matrix(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``C[i, j]`` = number of items with target i predicted as j (int64, ``[K, K]``)."""
    k = int(num_classes)
    return torch.bincount(target.long() * k + pred.long(), minlength=k * k).reshape(k, k)


def macro_f1(pred: torch.Tensor, target: torch.Tensor, num_classes: int | None = None) -> float:
    """Unweighted mean of the per-class F1 over the classes that occur in ``target`` or ``pred``."""
    if target.numel() == 0:
        return float("nan")
    k = int(num_classes) if num_classes is not None else int(torch.maximum(pred.max(), target.max())) + 1
    cm = confusion_matrix(pred, target, k).to(torch.float64)
    tp = cm.diagonal()
    support, predicted = cm.sum(1), cm.sum(0)
    present = (support + predicted) > 0
    denom = support + predicted  # 2·tp + fp + fn
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    return float(f1[present].mean())


def _as_2d(t: torch.Tensor) -> torch.Tensor:
    t = t.to(torch.float64)
    return t.reshape(t.shape[0], -1) if t.dim() != 1 else t[:, None]


def mse(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Mean squared error, averaged over items and outputs."""
    return float(((_as_2d(pred) - _as_2d(target)) ** 2).mean())


def mae(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Mean absolute error, averaged over items and outputs."""
    return float((_as_2d(pred) - _as_2d(target)).abs().mean())


def r2(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Coefficient of determination per output, averaged uniformly over outputs."""
    p, y = _as_2d(pred), _as_2d(target)
    ss_res = ((y - p) ** 2).sum(0)
    ss_tot = ((y - y.mean(0)) ** 2).sum(0)
    exact = (ss_res == 0).to(torch.float64)
    score = torch.where(ss_tot > 0, 1 - ss_res / ss_tot.clamp(min=torch.finfo(torch.float64).tiny), exact)
    return float(score.mean())


def compute(task: str, output: torch.Tensor, target: torch.Tensor, num_classes: int | None = None) -> dict[str, float]:
    """Every metric of ``task`` (see :data:`NAMES`) for model ``output`` against ``target``."""
    if task in ("classification", "node_classification"):
        pred = output.argmax(-1) if output.is_floating_point() and output.dim() == target.dim() + 1 else output
        pred, target = pred.detach().cpu(), target.detach().cpu()
        return {"accuracy": accuracy(pred, target), "macro_f1": macro_f1(pred, target, num_classes)}
    if task == "regression":
        pred, target = output.detach().cpu(), target.detach().cpu()
        if pred.numel() != target.numel():
            raise ValueError(f"regression output {tuple(pred.shape)} and target {tuple(target.shape)} differ")
        return {"mse": mse(pred, target), "mae": mae(pred, target), "r2": r2(pred, target)}
    raise ValueError(f"unknown task {task!r}")
