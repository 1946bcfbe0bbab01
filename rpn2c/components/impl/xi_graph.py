"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_graph` (imported when a model is built)."""

from __future__ import annotations

import functools

from rpn2c.components.impl.base import XiModule
from rpn2c.functional import structure


class _GraphXi(XiModule):
    def __init__(self, hp, axis="instance", one_hop: bool = False):
        super().__init__()
        self.hp, self.axis, self.one_hop = hp, axis, one_hop  # one_hop: the entry's ``one_hop()``

    def edge_list(self, aux, n, dtype, device):
        """(src, dst, w) with self-loops and normalisation applied: A[dst, src] = w. O(E).

        Shared within one forward by every ξ the optimiser found identical (``shared_xi``: same settings, same
        edge inputs), also under ``torch.compile``: the lowering passes ``aux["_share"] = (memo, key)``, the
        forward's memo and the key of the merged ξ. Across calls, the one graph cache (``graph_cache``) serves it
        while the same edge (and weight) tensors come back unmodified — a fixed training graph is normalised
        once; weights that need gradients and compiled graphs compute it in place.
        """
        shared = aux.get("_share")
        if shared is not None:
            memo, share = shared
            key = (share, n if isinstance(n, int) else str(n), dtype, device)  # str: a symbolic size
            if key not in memo:
                memo[key] = self._edge_list(aux, n, dtype, device)
            return memo[key]
        return self._edge_list(aux, n, dtype, device)

    def _edge_list(self, aux, n, dtype, device):
        hp = self.hp
        return structure.normalized_edges(aux["edges"], aux.get("weight"), n, dtype, device, hp.self_loops, hp.norm,
                                          hp.directed)

    def support(self, aux, n, dtype, device):
        """The edge list of the literal matrix when it is the 1-hop adjacency (hybrid's sparse path), else None."""
        if not self.one_hop:
            return None
        structure.check_edge_ids(aux["edges"], n, self.hp.edges.name, self.axis)
        return self.edge_list(aux, n, dtype, device)

    def _adjacency(self, aux, n, dtype, device):
        hp = self.hp
        return structure.graph_adjacency(aux["edges"], n, aux.get("weight"), directed=hp.directed,
                                         self_loops=hp.self_loops, normalization=hp.norm, device=device,
                                         dtype=dtype)

    def _from_adjacency(self, a):
        """The literal matrix, given the normalised 1-hop adjacency (multi-hop power or accumulation)."""
        return structure.multihop_graph(a, self.hp.hops, self.hp.mode == "accumulate", self.hp.include_identity)

    def _propagate(self, zz, src, dst, w, n, operator=None):
        """``_from_adjacency(A) @ zz`` on the edge list or its SpMM operator (never a dense multi-hop matrix)."""
        hp = self.hp
        return structure.multihop_propagate(zz, src, dst, w, n, hp.hops, hp.mode == "accumulate",
                                            hp.include_identity, dim=-2, operator=operator)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else (c.shape[-2] if self.axis == "instance" else c.shape[-1])
        structure.check_edge_ids(aux["edges"], n, self.hp.edges.name, self.axis)
        m = self._from_adjacency(self._adjacency(aux, n, q.dtype, q.device))
        return m if self.axis == "instance" else m.T

    def operator(self, aux, n):
        """``x ↦ A @ x`` on the graph's cached operator (one SpMM or GEMM per hop, built once per edge tensor, also
        under ``torch.compile``)."""
        hp = self.hp
        return functools.partial(structure.graph_mm, aux["edges"], aux.get("weight"), n=n, self_loops=hp.self_loops,
                                 norm=hp.norm, directed=hp.directed)

    def _on_items(self, z, aux, propagate):
        zz = z if self.axis == "instance" else z.transpose(-1, -2)
        n = zz.shape[-2]
        structure.check_edge_ids(aux["edges"], n, self.hp.edges.name, self.axis)
        y = propagate(zz, n)
        return y if self.axis == "instance" else y.transpose(-1, -2)

    def spmm(self, z, q, c, aux):
        """Kernel op ``spmm`` (``rpn2c.components.xi_graph.SPMM``): every hop one product with the cached operator."""
        return self._on_items(z, aux, lambda zz, n: self._propagate(zz, None, None, None, n,
                                                                      operator=self.operator(aux, n)))

    def gather_scatter(self, z, q, c, aux):
        """Propagation on the normalised edge list (gather, ``index_add``): ``spmm``'s declared fallback."""
        return self._on_items(z, aux, lambda zz, n: self._propagate(zz, *self.edge_list(aux, n, zz.dtype, zz.device),
                                                                      n))

    def apply(self, z, q, c, aux):
        return self.gather_scatter(z, q, c, aux)
