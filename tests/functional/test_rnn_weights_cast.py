"""``rnn_weights.cast``: a flat buffer's tensors cast to another dtype in one cast, as views of one new buffer at
the offsets they had in the old one (gaps kept), with each tensor's own gradient."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from rpn2c.functional.rnn_weights import cast, layout
from tests.op_count import count_ops


def _buffer(sizes, gaps, lead=0, tail=0):
    """Views of one float64 storage: tensor i of ``sizes[i]`` elements after ``gaps[i]`` unused ones."""
    g = torch.Generator().manual_seed(len(sizes))
    storage = torch.randn(lead + sum(sizes) + sum(gaps) + tail, dtype=torch.float64, generator=g)
    views, at = [], lead
    for n, gap in zip(sizes, gaps):
        at += gap
        views.append(storage[at: at + n].view(n // 2, 2) if n % 2 == 0 else storage[at: at + n])
        at += n
    return views


@given(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 3)), min_size=1, max_size=6), st.integers(0, 5),
       st.booleans())
def test_one_cast_views_at_the_flat_buffer_s_offsets_and_each_tensor_s_gradient(pieces, tail, reverse):
    sizes, gaps = [n for n, _ in pieces], [g for _, g in pieces]
    views = _buffer(sizes, gaps, tail=tail)
    if reverse:  # the kernel's order need not be the storage's (cuDNN decides its offsets)
        views = views[::-1]
    where = layout(views)
    assert where == (tuple(v.storage_offset() for v in views), views[0].untyped_storage().nbytes() // 8)
    leaves = [v.detach().clone().requires_grad_(True) for v in views]  # the same values, separate tensors
    ops = count_ops(lambda: cast(views, torch.float32, where))
    assert ops["_to_copy"] == 1  # one cast of the whole buffer, whatever the number of tensors
    got = cast(leaves, torch.float32, where)
    storage = got[0].untyped_storage()
    assert storage.nbytes() == where[1] * 4  # the buffer's length, gaps and tail included
    for g, v, o in zip(got, views, where[0]):
        assert g.dtype == torch.float32 and g.shape == v.shape and g.is_contiguous()
        assert g.untyped_storage().data_ptr() == storage.data_ptr() and g.storage_offset() == o
        assert_close(g, v.to(torch.float32), rtol=0, atol=0)  # rounding is elementwise: a cast of each, bitwise
    weights = [torch.randn(v.shape, dtype=torch.float32) for v in views]
    grads = torch.autograd.grad(sum((g * w).sum() for g, w in zip(got, weights)), leaves)
    for grad, w in zip(grads, weights):
        assert grad.dtype == torch.float64
        assert_close(grad, w.double(), rtol=0, atol=0)


def test_without_a_layout_the_tensors_are_packed_in_their_order():
    a, b = torch.randn(2, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)  # two storages
    assert layout([a, b]) is None
    got = cast([a, b], torch.float32)
    assert [t.storage_offset() for t in got] == [0, 6] and got[1].untyped_storage().nbytes() == 10 * 4
    assert_close(got[0], a.float(), rtol=0, atol=0)
    assert_close(got[1], b.float(), rtol=0, atol=0)


@pytest.mark.parametrize("where", [((0, 4), 10), ((0,), 10), ((0, 6), 6)], ids=["overlap", "short", "past-end"])
def test_a_layout_that_cannot_hold_the_tensors_is_not_followed(where):
    a, b = torch.randn(6, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    got = cast([a, b], torch.float32, where)
    assert [t.storage_offset() for t in got] == [0, 6]  # packed: neither overlapping nor past the buffer
    assert_close(torch.cat(got), torch.cat([a, b]).float(), rtol=0, atol=0)
