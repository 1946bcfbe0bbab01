"""Stateful compressions (section (c) of :mod:`rpn2c.functional.compression`) as ``nn.Module`` classes whose state
lives in registered buffers (``state_dict`` round-trips): incremental variance threshold, incremental feature
clustering, incremental PCA, random projection, naive and combinatorial probabilistic compression, and (only with
scikit-learn) manifold embeddings. Imported when a model is built; ``compression`` re-exports every class.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from rpn2c.functional.compression import (COMPRESSION_DISTRIBUTIONS, _MANIFOLDS, _gen, gaussian_random_matrix,
                                          sparse_random_matrix)
from rpn2c.functional.expansion import combination_index, log_pdf, mvn_equicorrelated_log_pdf, positive_squash
from rpn2c.functional.untraced import untraced


# ----------------------------------------------------------------------------------------------------------------------
# (c) Stateful compressions
# ----------------------------------------------------------------------------------------------------------------------


class _Stateful(nn.Module):
    """Base: counts updates in a buffer mirrored by a Python int (so control flow never syncs with the device)."""

    def __init__(self, m: int, max_updates: int | None) -> None:
        super().__init__()
        if m < 1:
            raise ValueError("m must be >= 1")
        if max_updates is not None and max_updates < 1:
            raise ValueError("max_updates must be >= 1 or None")
        self.m = int(m)
        self.max_updates = max_updates
        self.register_buffer("n_updates", torch.zeros((), dtype=torch.long))
        self._n = 0
        self.register_load_state_dict_post_hook(_sync_counter)

    @property
    def frozen(self) -> bool:
        return self.max_updates is not None and self._n >= self.max_updates

    def _should_update(self) -> bool:
        return self.training and not self.frozen

    def _tick(self) -> int:
        self._n += 1
        self.n_updates.fill_(self._n)
        return self._n

    def _rows(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.m:
            raise ValueError(f"expected last axis {self.m}, got {x.shape[-1]}")
        return x.reshape(-1, self.m)


def _sync_counter(module: nn.Module, incompatible_keys: Any) -> None:
    module._n = int(module.n_updates)  # once per load, not per forward


class IncrementalVarianceThreshold(_Stateful):
    """Keep the k attributes with the largest running mean variance (eq 96–98, top-k form).

    Per update: v = var(X) over all leading axes (population), v̄ ← v̄ + (v - v̄)/t (eq 97), selected = indices of
    top-k v̄ in ascending index order. Output x[..., selected], d = k. Before the first update selected = 0..k-1.
    """

    def __init__(self, m: int, k: int, *, max_updates: int | None = None, correction: int = 0) -> None:
        super().__init__(m, max_updates)
        if not 1 <= k <= m:
            raise ValueError("need 1 <= k <= m")
        self.k = int(k)
        self.correction = int(correction)
        self.register_buffer("mean_variance", torch.zeros(m))
        self.register_buffer("selected", torch.arange(k))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        v = torch.var(self._rows(x).to(self.mean_variance.dtype), dim=0, correction=self.correction)
        t = self._tick()
        self.mean_variance.add_((v - self.mean_variance) / t)
        self.selected.copy_(torch.topk(self.mean_variance, self.k).indices.sort().values)

    def forward(self, x: Tensor) -> Tensor:
        if self._should_update():
            self.update(x.detach())
        return x.index_select(-1, self.selected)


class IncrementalFeatureClustering(_Stateful):
    """Partition the m attributes into k clusters by running mean cosine similarity and keep one per cluster
    (eq 99–100).

    Per update: S̄ ← S̄ + (cos(X) - S̄)/t with cos(X)_ij = <X_:i, X_:j>/(|X_:i||X_:j|) (|S| if ``absolute``), and the
    running variance v̄ as in :class:`IncrementalVarianceThreshold`. Clustering is deterministic k-medoids on S̄:
    farthest-point initialisation from the top-variance attribute, then ``iters`` rounds of (assign each attribute to
    its most similar medoid; medoid := the member with the largest summed similarity to its cluster).
    ``output="select"``: x at the top-variance attribute of each cluster, in ascending index order;
    ``output="centroid"``: the mean of each cluster's attributes (the toolkit's variant), clusters ordered as selected.
    """

    def __init__(self, m: int, k: int, *, max_updates: int | None = None, iters: int = 10,
                 output: str = "select", absolute: bool = False) -> None:
        super().__init__(m, max_updates)
        if not 1 <= k <= m:
            raise ValueError("need 1 <= k <= m")
        if output not in ("select", "centroid"):
            raise ValueError("output must be 'select' or 'centroid'")
        self.k, self.iters, self.output, self.absolute = int(k), int(iters), output, bool(absolute)
        self.register_buffer("similarity", torch.eye(m))
        self.register_buffer("mean_variance", torch.zeros(m))
        self.register_buffer("labels", torch.arange(m).clamp(max=k - 1))
        self.register_buffer("selected", torch.arange(k))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        X = self._rows(x).to(self.similarity.dtype)
        v = torch.var(X, dim=0, correction=0)
        Xn = X / torch.linalg.vector_norm(X, dim=0).clamp(min=torch.finfo(X.dtype).tiny)
        S = Xn.T @ Xn
        if self.absolute:
            S = S.abs()
        t = self._tick()
        self.similarity.add_((S - self.similarity) / t)
        self.mean_variance.add_((v - self.mean_variance) / t)
        labels, selected = self._cluster(self.similarity, self.mean_variance)
        self.labels.copy_(labels)
        self.selected.copy_(selected)

    def _cluster(self, S: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        k = self.k
        medoids = var.argmax().reshape(1)
        for _ in range(1, k):   # farthest point: least max-similarity to the chosen medoids
            closeness = S[:, medoids].amax(dim=1).clone()
            closeness[medoids] = math.inf
            medoids = torch.cat((medoids, closeness.argmin().reshape(1)))
        cl = torch.arange(k, device=S.device)
        labels = S[:, medoids].argmax(dim=1)
        for _ in range(self.iters):
            labels = S[:, medoids].argmax(dim=1)
            labels[medoids] = cl                         # a medoid stays in its own cluster
            member = labels.unsqueeze(1) == cl           # [m, k]
            score = S @ member.to(S.dtype)               # Σ_{j in c} S_ij
            score = torch.where(member, score, torch.full_like(score, -math.inf))
            medoids = score.argmax(dim=0)
        labels = S[:, medoids].argmax(dim=1)
        labels[medoids] = cl
        member = labels.unsqueeze(1) == cl
        best = torch.where(member, var.unsqueeze(1), torch.full_like(S[:, :k], -math.inf)).argmax(dim=0)
        order = best.argsort()
        # relabel clusters so that cluster c owns selected[c] (ascending attribute index)
        relabel = torch.empty_like(order)
        relabel[order] = cl
        return relabel[labels], best[order]

    def forward(self, x: Tensor) -> Tensor:
        if self._should_update():
            self.update(x.detach())
        if self.output == "select":
            return x.index_select(-1, self.selected)
        member = (self.labels.unsqueeze(1) == torch.arange(self.k, device=x.device)).to(x.dtype)
        return x @ (member / member.sum(0).clamp(min=1))


def _symmetric_eigh(S: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.linalg.eigh`` of the symmetric PSD ``S`` (ascending); where LAPACK's float32 solver does not
    converge (a low-rank Gram of few rows: many repeated zero eigenvalues) the float64 one, then an SVD (for a PSD
    matrix its singular values and vectors are the eigenvalues and vectors). Non-finite entries give NaN."""
    if not torch.isfinite(S).all():
        n = S.shape[-1]
        return S.new_full((n,), float("nan")), S.new_full((n, n), float("nan"))
    for attempt in (S, S.double()):
        try:
            evals, evecs = torch.linalg.eigh(attempt)
            return evals.to(S.dtype), evecs.to(S.dtype)
        except torch.linalg.LinAlgError:
            continue
    U, sv, _ = torch.linalg.svd(S.double())
    return sv.flip(0).to(S.dtype), U.flip(-1).to(S.dtype)


class IncrementalPCA(_Stateful):
    """kappa(x) = x V_k (eq 101–102), V_k = top-k right singular vectors of all rows seen so far.

    Exact incremental form: accumulate n, Σx and XᵀX; V_k = top-k eigenvectors of XᵀX/n (``center=False``, the
    paper's SVD of raw X) or of the covariance XᵀX/n - μμᵀ (``center=True``, sklearn/toolkit; output (x - μ) V_k).
    This equals the SVD of the concatenated batches (what Ross et al.'s incremental SVD approximates). Signs are
    fixed so the largest-|.| entry of each component is positive. Before the first update V = I[:, :k].
    """

    def __init__(self, m: int, k: int, *, center: bool = False, max_updates: int | None = None) -> None:
        super().__init__(m, max_updates)
        if not 1 <= k <= m:
            raise ValueError("need 1 <= k <= m")
        self.k, self.center = int(k), bool(center)
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("sum", torch.zeros(m))
        self.register_buffer("gram", torch.zeros(m, m))
        self.register_buffer("mean", torch.zeros(m))
        self.register_buffer("components", torch.eye(m)[:, :k].clone())
        self.register_buffer("explained_variance", torch.zeros(k))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        X = self._rows(x).to(self.gram.dtype)
        self._tick()
        self.count.add_(X.shape[0])
        self.sum.add_(X.sum(0))
        self.gram.add_(X.T @ X)
        self.mean.copy_(self.sum / self.count)
        M = self.gram / self.count
        if self.center:
            M = M - torch.outer(self.mean, self.mean)
        evals, evecs = _symmetric_eigh(0.5 * (M + M.T))
        V = evecs[:, -self.k:].flip(-1)
        pivot = V.abs().argmax(dim=0)
        sign = torch.sign(V.gather(0, pivot.unsqueeze(0)))
        self.components.copy_(V * torch.where(sign == 0, torch.ones_like(sign), sign))
        self.explained_variance.copy_(evals[-self.k:].flip(-1))

    def forward(self, x: Tensor) -> Tensor:
        if self._should_update():
            self.update(x.detach())
        V = self.components.to(x.dtype)
        return (x - self.mean.to(x.dtype)) @ V if self.center else x @ V


class RandomProjection(nn.Module):
    """kappa(x) = x R with a frozen random R [m, k] stored as a buffer (eq 103–105).

    ``kind="gaussian"``: R_ij ~ N(0, 1/k); ``kind="sparse"``: ±sqrt(1/(s k)) w.p. s/2, 0 w.p. 1-s.
    """

    def __init__(self, m: int, k: int, *, kind: str = "gaussian", density: float | None = None, seed: int = 0) -> None:
        super().__init__()
        if kind == "gaussian":
            R = gaussian_random_matrix(m, k, seed=seed)
        elif kind == "sparse":
            R = sparse_random_matrix(m, k, density=density, seed=seed)
        else:
            raise ValueError("kind must be 'gaussian' or 'sparse'")
        self.kind = kind
        self.register_buffer("R", R)

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.R.to(x.dtype)


# -- probabilistic sampling ------------------------------------------------------------------------------------------

#: distribution -> default parameters for probabilistic compression (the toolkit's defaults)


class _Sampler(nn.Module):
    """Reproducible per-forward noise: call j uses a generator seeded with (seed, j); j is a buffer."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = int(seed)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self._calls = 0
        self.register_load_state_dict_post_hook(_sync_calls)

    def _generator(self, device: torch.device) -> torch.Generator:
        g = torch.Generator(device=device)
        g.manual_seed((self.seed * 1_000_003 + self._calls) % (2**63 - 1))
        self._calls += 1
        self.calls.fill_(self._calls)
        return g

    @staticmethod
    def _gumbel(shape: Sequence[int], g: torch.Generator, like: Tensor) -> Tensor:
        u = torch.rand(tuple(shape), generator=g, dtype=like.dtype, device=like.device)
        fi = torch.finfo(like.dtype)
        return -torch.log(-torch.log(u.clamp(min=fi.tiny, max=1.0 - fi.eps)))

    def _sample(self, logits: Tensor, d: int, with_replacement: bool) -> Tensor:
        """Indices [..., d] (ascending) drawn ∝ softmax(logits) over the last axis, without or with replacement.

        Without replacement uses Gumbel-top-d, which is exactly sequential sampling without replacement.
        """
        g = self._generator(logits.device)
        if with_replacement:
            probs = torch.softmax(logits, dim=-1)
            cdf = probs.cumsum(-1)
            u = torch.rand((*logits.shape[:-1], d), generator=g, dtype=logits.dtype, device=logits.device)
            idx = torch.searchsorted(cdf.contiguous(), (u * cdf[..., -1:]).contiguous())
            idx = idx.clamp(max=logits.shape[-1] - 1)
        else:
            idx = torch.topk(logits + self._gumbel(logits.shape, g, logits), d, dim=-1).indices
        return idx.sort(dim=-1).values


def _sync_calls(module: nn.Module, incompatible_keys: Any) -> None:
    module._calls = int(module.calls)


class NaiveProbabilisticCompression(_Sampler):
    """Sample d of the m attributes per instance without replacement (eq 106–109).

    Sampling weights ∝ p(f(x_i) | θ) (eq 108) with f = 0.99·sigmoid + 0.001 when ``normalize`` (toolkit), or
    uniform for ``dist="uniform"`` (weights constant on the normalized values). Indices are sorted ascending.
    ``output``: "value" (x at the sampled attributes, toolkit simply_sampling), "normalized" (f(x) there) or
    "log_prob" (log p(f(x) | θ) there, eq 109). Randomness: call j draws from a generator seeded by (seed, j), so a
    run is deterministic given the seed (and the call counter is part of ``state_dict``). ``fixed=True`` (uniform
    only) draws one index set at construction and uses it for every instance: a pure gather.
    """

    def __init__(self, m: int, d: int, *, dist: str = "uniform", params: Sequence[float] | None = None,
                 output: str = "value", normalize: bool = True, with_replacement: bool = False, fixed: bool = False,
                 seed: int = 0) -> None:
        super().__init__(seed)
        if dist not in COMPRESSION_DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {dist!r}; known: {sorted(COMPRESSION_DISTRIBUTIONS)}")
        if not 1 <= d <= m and not with_replacement:
            raise ValueError("need 1 <= d <= m without replacement")
        if output not in ("value", "normalized", "log_prob"):
            raise ValueError("output must be 'value', 'normalized' or 'log_prob'")
        if fixed and dist != "uniform":
            raise ValueError("fixed=True needs dist='uniform' (weights would depend on x)")
        self.m, self.d, self.dist = int(m), int(d), dist
        self.params = tuple(COMPRESSION_DISTRIBUTIONS[dist] if params is None else params)
        self.output, self.normalize, self.with_replacement, self.fixed = output, normalize, with_replacement, fixed
        if fixed:
            g = _gen(self.seed)
            if with_replacement:
                idx = torch.randint(0, m, (d,), generator=g)
            else:
                idx = torch.randperm(m, generator=g)[:d]
            self.register_buffer("fixed_index", idx.sort().values)

    def _f(self, x: Tensor) -> Tensor:
        return positive_squash(x) if self.normalize else x

    def _logp(self, u: Tensor) -> Tensor:
        return log_pdf(u, self.dist, self.params, squash=False)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.m:
            raise ValueError(f"expected last axis {self.m}, got {x.shape[-1]}")
        u = self._f(x)
        if self.fixed:
            idx = self.fixed_index
            picked = (x if self.output == "value" else u).index_select(-1, idx)
        else:
            logits = torch.zeros_like(u) if self.dist == "uniform" else self._logp(u.detach())
            idx = self._sample(logits, self.d, self.with_replacement)
            picked = torch.gather(x if self.output == "value" else u, -1, idx)
        return self._logp(picked) if self.output == "log_prob" else picked


class CombinatorialProbabilisticCompression(_Sampler):
    """Sample attribute tuples by multivariate-normal likelihood (eq 110–112).

    Tuples: all r-subsets of the attributes (lexicographic), r = 1..k, evaluated at f(x) = 0.99·sigmoid(x)+0.001
    when ``normalize`` (toolkit). Weights ∝ N(f(x_S) | loc, Σ_r) with Σ_r = scale²((1-rho)I + rho·11ᵀ).
    ``per_size=True`` (toolkit): d tuples per size r, output [r=1 block, ..., r=k block]; ``per_size=False``
    (paper eq 112): d tuples from the pooled set. ``output="log_prob"``: log N of each sampled tuple (d·k or d
    values); ``output="value"`` (per_size only): the tuples' raw values, d·k(k+1)/2 values.
    """

    def __init__(self, m: int, *, k: int = 2, d: int = 1, per_size: bool = True, output: str = "log_prob",
                 normalize: bool = True, with_replacement: bool = False, loc: float = 0.0, scale: float = 1.0,
                 rho: float = 0.0, seed: int = 0) -> None:
        super().__init__(seed)
        if k < 1 or k > m:
            raise ValueError("need 1 <= k <= m")
        if output not in ("log_prob", "value"):
            raise ValueError("output must be 'log_prob' or 'value'")
        if output == "value" and not per_size:
            raise ValueError("output='value' needs per_size=True (pooled tuples have different lengths)")
        n_min = min(math.comb(m, r) for r in range(1, k + 1))
        total = sum(math.comb(m, r) for r in range(1, k + 1))
        if not with_replacement and d > (n_min if per_size else total):
            raise ValueError("d exceeds the number of available tuples")
        self.m, self.k, self.d = int(m), int(k), int(d)
        self.per_size, self.output = per_size, output
        self.normalize, self.with_replacement = normalize, with_replacement
        self.loc, self.scale, self.rho = float(loc), float(scale), float(rho)

    @property
    def out_dim(self) -> int:
        if self.output == "value":
            return self.d * self.k * (self.k + 1) // 2
        return self.d * self.k if self.per_size else self.d

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.m:
            raise ValueError(f"expected last axis {self.m}, got {x.shape[-1]}")
        u = positive_squash(x) if self.normalize else x
        blocks_lp, blocks_raw = [], []
        for r in range(1, self.k + 1):
            ci = combination_index(self.m, r, device=x.device)
            blocks_raw.append(x[..., ci])                                # [..., C_r, r]
            blocks_lp.append(mvn_equicorrelated_log_pdf(u[..., ci], loc=self.loc, scale=self.scale, rho=self.rho))
        if self.per_size:
            outs = []
            for r, (lp, raw) in enumerate(zip(blocks_lp, blocks_raw), start=1):
                idx = self._sample(lp.detach(), self.d, self.with_replacement)   # [..., d]
                if self.output == "log_prob":
                    outs.append(torch.gather(lp, -1, idx))
                else:
                    gi = idx.unsqueeze(-1).expand(*idx.shape, r)
                    outs.append(torch.gather(raw, -2, gi).flatten(-2))
            return torch.cat(outs, dim=-1)
        lp = torch.cat(blocks_lp, dim=-1)
        idx = self._sample(lp.detach(), self.d, self.with_replacement)
        return torch.gather(lp, -1, idx)


# -- manifold methods (optional, scikit-learn) -----------------------------------------------------------------------


class ManifoldCompression(nn.Module):
    """Non-differentiable manifold embedding of each batch into k dims via scikit-learn (fit_transform per call).

    A batch of r rows embeds into at most r − 2 dims (the rest are zeros), Isomap into no more dims than its geodesic
    kernel's large eigenvalues allow, and neighbour counts are capped at r − 1, so any batch size runs.

    ``method`` in isomap, tsne, lle, mds, spectral_embedding, smacof. The embedding is transductive: each batch is
    embedded on its own, on the CPU, with no gradient, so this is not a data-path operator; it exists for parity with
    the toolkit's manifold compressions. Raises ImportError without scikit-learn.
    """

    def __init__(self, k: int, *, method: str = "isomap", seed: int = 0, **kw: Any) -> None:
        super().__init__()
        try:
            import sklearn.manifold  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("ManifoldCompression needs scikit-learn (a dependency of rpn2c): "
                              "pip install scikit-learn") from e
        if method not in _MANIFOLDS:
            raise ValueError(f"unknown manifold method {method!r}; known: {_MANIFOLDS}")
        self.k, self.method, self.seed, self.kw = int(k), method, int(seed), dict(kw)

    def _embed(self, X: Any) -> Any:
        rows = X.shape[0]
        import numpy as np

        if not np.isfinite(X).all():  # NaN or ±inf in, NaN out (as a torch op propagates them; scikit-learn refuses)
            return np.full((rows, self.k), np.nan)
        out = np.zeros((rows, self.k))
        if rows == 0 or np.ptp(X, axis=0).max(initial=0.0) == 0:  # one point, repeated: embedded at the origin
            return out  # (t-SNE would divide its initial layout by a zero spread and crash in C)
        if rows <= self.k + 1 or rows < 4:  # too few rows to embed into k dims: embed into fewer, pad with zeros
            k = min(self.k, rows - 2)
            if rows >= 4 and k >= 1:
                out[:, :k] = self._embed_into(X, k)
            return out
        return self._embed_into(X, self.k)

    def _embed_into(self, X: Any, k: int) -> Any:
        """The rows embedded into ``k`` dims, or into the most dims below ``k`` the method gives, zeros after them:
        Isomap's geodesic kernel has large negative eigenvalues when ``k`` nears the rows (its distances are not
        Euclidean), and scikit-learn refuses to embed along them."""
        import numpy as np

        for dims in range(k, 0, -1):
            try:
                emb = (self if dims == self.k else type(self)(dims, method=self.method, seed=self.seed,
                                                              **self.kw))._embed_rows(X)
            except ValueError as exc:
                if "negative eigenvalues" not in str(exc) or dims == 1:
                    raise
                continue
            out = np.zeros((X.shape[0], k))
            out[:, :dims] = emb
            return out

    def _embed_rows(self, X: Any) -> Any:
        import sklearn.manifold as M
        from sklearn.metrics import pairwise_distances

        rows = X.shape[0]
        kw = dict(self.kw)
        if "n_neighbors" in kw:  # a neighbour graph over the batch's own rows: at most rows − 1 neighbours
            kw["n_neighbors"] = min(kw["n_neighbors"], rows - 1)
        if self.method == "isomap":
            return M.Isomap(n_components=self.k, **kw).fit_transform(X)
        if self.method == "tsne":
            kw = {"perplexity": min(30.0, max(1.0, (rows - 1) / 3)), **kw}
            if self.k >= 4:  # Barnes-Hut t-SNE embeds into at most 3 dims
                kw.setdefault("method", "exact")
            kw["perplexity"] = min(kw["perplexity"], rows - 1.0)
            return M.TSNE(n_components=self.k, random_state=self.seed, **kw).fit_transform(X)
        if self.method == "lle":
            return M.LocallyLinearEmbedding(n_components=self.k, random_state=self.seed, **kw).fit_transform(X)
        if self.method == "mds":
            return M.MDS(n_components=self.k, random_state=self.seed, **kw).fit_transform(X)
        if self.method == "spectral_embedding":
            return M.SpectralEmbedding(n_components=self.k, random_state=self.seed, **kw).fit_transform(X)
        return M.smacof(pairwise_distances(X), n_components=self.k, random_state=self.seed, **kw)[0]

    @untraced
    def _host_embed(self, x: Tensor) -> Tensor:
        """Not traced: scikit-learn on the host cannot be, so torch.compile breaks the graph here (``untraced``:
        ``torch.compiler.disable`` once dynamo is imported, never importing it where nothing is compiled)."""
        return torch.as_tensor(self._embed(x.detach().reshape(-1, x.shape[-1]).cpu().double().numpy()))

    def forward(self, x: Tensor) -> Tensor:
        Y = self._host_embed(x)
        return Y.to(dtype=x.dtype, device=x.device).reshape(*x.shape[:-1], self.k)


