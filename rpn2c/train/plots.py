"""PNG pictures (matplotlib's Agg canvas, no pyplot state, no display needed): training curves and
interdependence matrices drawn as the RPN 2 paper draws them (one cell per matrix entry, 0/1 matrices black on
white, weighted ones on a colour scale with a colour bar)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from . import metrics as metrics_mod


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def training_curves(history: Sequence[dict], path: str | os.PathLike, task: str, title: str = "") -> Path:
    """Two panels over epochs: train/validation loss, and the task's main metric (train/validation where
    recorded; histories of older runs show their per-epoch test scores)."""
    from matplotlib.ticker import MaxNLocator

    fig = _figure(10, 4)
    epochs = [r["epoch"] for r in history]
    ax_loss, ax_metric = fig.subplots(1, 2)
    ax_loss.plot(epochs, [r["loss"] for r in history], marker=".", label="train loss")
    split = "val" if any("val_loss" in r for r in history) else "test"
    ax_loss.plot(epochs, [r.get(f"{split}_loss", math.nan) for r in history], marker=".", label=f"{split} loss")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("loss")
    ax_loss.set_yscale("log" if all(r["loss"] > 0 for r in history) else "linear")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    name = metrics_mod.PRIMARY[task][0]
    if any(f"train_{name}" in r for r in history):
        ax_metric.plot(epochs, [r.get(f"train_{name}", math.nan) for r in history], marker=".", label=f"train {name}")
    ax_metric.plot(epochs, [r.get(f"{split}_{name}", math.nan) for r in history], marker=".",
                   label=f"{split} {name}")
    ax_metric.set_xlabel("epoch")
    for ax in (ax_loss, ax_metric):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_metric.set_ylabel(name)
    ax_metric.legend()
    ax_metric.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def matrices(panels: Sequence[dict], path: str | os.PathLike, title: str = "") -> Path:
    """One panel per matrix. Each panel: ``matrix`` (2-D tensor), ``title``, ``rows``, ``cols`` (axis labels).

    0/1 matrices are drawn black on white (``spy`` markers for large ones, so no column is lost to
    down-sampling); weighted matrices on a colour scale with exact zeros left white, so sparsity stays visible.
    """
    import numpy as np

    n = len(panels)
    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    ratio = max(p["matrix"].shape[1] / max(p["matrix"].shape[0], 1) for p in panels)
    width = min(max(4.6, 4.0 * ratio ** 0.5), 12.0) if n == 1 else 4.6
    fig = _figure(width * ncols + 0.4, 4.2 * nrows + 0.8)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, panel in zip(axes, panels):
        m = panel["matrix"].detach().to("cpu", torch.float64).numpy()
        r, c = m.shape
        binary = bool(np.isin(m, (0.0, 1.0)).all())
        aspect = "equal" if max(r, c) <= 3 * min(r, c) else "auto"
        if binary and max(r, c) > 128:
            ax.spy(m, markersize=max(0.3, min(4.0, 240.0 / max(r, c))), color="black", aspect=aspect)
            ax.xaxis.set_ticks_position("bottom")
        elif binary:
            ax.imshow(m, cmap="Greys", vmin=0, vmax=1, interpolation="nearest", aspect=aspect)
        else:
            cmap = _colormap()
            shown = np.ma.masked_where((m == 0.0) | ~np.isfinite(m), m)  # inf and NaN have no colour: blank
            im = ax.imshow(shown, cmap=cmap, interpolation="nearest", aspect=aspect)
            with np.errstate(over="ignore"):  # a colour scale needs a finite span (±1e308 overflows it)
                spans = bool(shown.count()) and bool(np.isfinite(float(shown.max()) - float(shown.min())))
            if spans:
                fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        nnz = int(np.count_nonzero(m))
        bad = int((~np.isfinite(m)).sum())
        ax.set_title(f"{panel['title']}\n{r}×{c}, {nnz} non-zero ({100 * nnz / max(r * c, 1):.1f}%)"
                     + (f", {bad} not finite (blank)" if bad else ""), fontsize=8)
        ax.set_ylabel(panel.get("rows", "row"), fontsize=9)
        ax.set_xlabel(panel.get("cols", "column"), fontsize=9)
    for ax in axes[n:]:
        ax.set_axis_off()
    if title:
        fig.suptitle(title, fontsize=10, wrap=True)
    fig.tight_layout()
    return _save(fig, path)


def _colormap():
    import matplotlib

    return matplotlib.colormaps["viridis"].with_extremes(bad="white")
