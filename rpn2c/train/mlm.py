"""The masked-language-model objective (BERT's pre-training task, seed 001 §6.5): ``rpn2c train --objective mlm``.

For a batch of token ids ``x ∈ [0, V−1)^{B x T}`` and a spec returning logits ``sequence[B, T, V]`` (the last id,
``V − 1`` unless ``--mask-id`` says otherwise, is [MASK]): each position is chosen with probability ``rate``
(seed 001: 15%); a chosen position's label is its id and the others' is −100 (ignored); a chosen input becomes
[MASK] with probability 0.8, a uniformly random id other than [MASK] with 0.1, and stays with 0.1 (footnote 11).
The loss is the mean cross-entropy over the chosen positions; the reported perplexity is ``exp`` of the mean
cross-entropy per masked token over an evaluation split, and the accuracy the share of masked tokens predicted.
Training masks come from torch's global generator (seeded by the run, restored by ``--resume``); validation and
test masks from a generator seeded with 0, so every epoch, ``rpn2c eval`` and ``rpn2c predict`` score the same
masked tokens. ``predict`` fills each chosen position (or, on the user's ids, each [MASK]) with the arg max of its
logits, ``ŷ_t = argmax_v softmax(z_t)_v``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

IGNORE = -100  # the label of a position that is not predicted (torch's cross_entropy ignore_index)
REPLACE = (0.8, 0.1, 0.1)  # [MASK], a random id, unchanged


def mask_tokens(ids: torch.Tensor, rate: float, mask_id: int, vocab: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)``: BERT's 80/10/10 corruption of ``ids`` at positions chosen with probability ``rate``;
    ``labels`` holds the original id there and ``IGNORE`` elsewhere. Random ids are uniform over the ``vocab``
    ids other than ``mask_id``."""
    def uniform():
        return torch.rand(ids.shape, generator=generator, device=generator.device if generator else ids.device)

    chosen = (uniform() < rate).to(ids.device)
    roll = uniform().to(ids.device)
    to_mask = chosen & (roll < REPLACE[0])
    to_random = chosen & (roll >= REPLACE[0]) & (roll < REPLACE[0] + REPLACE[1])
    random_ids = torch.randint(0, vocab - 1, ids.shape, generator=generator,
                               device=generator.device if generator else ids.device).to(ids.device)
    random_ids = random_ids + (random_ids >= mask_id).to(ids.dtype)  # every id but [MASK]
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), torch.where(to_random, random_ids, ids))
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    return inputs, labels


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the labelled positions: ``logits [B, T, V]``, ``labels [B, T]``."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE)


def sums(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[Σ cross-entropy, correct, count]`` over the labelled positions (float64), for split-wide metrics."""
    flat, target = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    keep = target != IGNORE
    ce = F.cross_entropy(flat.float(), target, ignore_index=IGNORE, reduction="sum")
    correct = ((flat.argmax(-1) == target) & keep).sum()
    return torch.stack([ce.double(), correct.double(), keep.sum().double()])


def metrics(total: torch.Tensor) -> dict[str, float]:
    """``loss`` (mean cross-entropy per masked token), ``perplexity`` = exp(loss), masked-token ``accuracy``."""
    ce, correct, count = (float(v) for v in total)
    if count == 0:
        return {"loss": float("nan"), "perplexity": float("nan"), "accuracy": float("nan")}
    mean = ce / count
    return {"loss": mean, "perplexity": math.exp(min(mean, 700.0)), "accuracy": correct / count}


def evaluation_batches(ids: torch.Tensor, rate: float, mask_id: int, vocab: int, batch_size: int):
    """The fixed masked batches of an evaluation split: ``(inputs, labels)`` per batch, one generator seeded 0."""
    gen = torch.Generator().manual_seed(0)
    for i in range(0, ids.shape[0], batch_size):
        yield mask_tokens(ids[i:i + batch_size], rate, mask_id, vocab, gen)


def evaluation_split(ids: torch.Tensor, rate: float, mask_id: int, vocab: int, batch_size: int):
    """``(inputs, labels)`` of a whole split: the batches of :func:`evaluation_batches`, concatenated."""
    parts = list(evaluation_batches(ids, rate, mask_id, vocab, batch_size))
    if not parts:
        return ids, torch.full_like(ids, IGNORE)
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def fill(logits: torch.Tensor, chosen: torch.Tensor) -> dict[str, torch.Tensor]:
    """The filled positions of ``chosen [n, T]`` (row-major): ``sample``, ``position``, ``prediction`` (the arg max
    of the logits ``[n, T, V]``) and its ``probability`` (softmax)."""
    sample, position = chosen.nonzero(as_tuple=True)
    prob = torch.softmax(logits[sample, position].double(), dim=-1)
    best, prediction = prob.max(-1)
    return {"sample": sample, "position": position, "prediction": prediction, "probability": best}
