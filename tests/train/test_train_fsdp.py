"""FSDP2 (``fully_shard``) around a compiled spec on CPU with gloo: sharded training equals one process."""

from __future__ import annotations

import os
import socket
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rpn2c
from tests.train.helpers import ROOT

SPEC = ROOT / "specs" / "mlp.rpn"


def _batch():
    g = torch.Generator().manual_seed(5)
    return torch.randn(16, 30, generator=g, dtype=torch.float64), torch.randint(0, 2, (16,), generator=g)


def _steps(model, x, y, n=3):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(n):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x=x), y).backward()
        opt.step()


def _worker(rank, world, port, out):
    from rpn2c.train import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = rpn2c.compile_file(SPEC).double()  # mlp.rpn has no dropout: the runs are comparable
        sharded = distributed.wrap(model, "fsdp", torch.device("cpu"))
        assert any(type(p).__name__ == "DTensor" for p in sharded.parameters())
        x, y = _batch()
        half = slice(rank * 8, (rank + 1) * 8)  # each rank its half of the batch; gradients are averaged
        _steps(sharded, x[half], y[half])
        state = distributed.full_state_dict(sharded)
        torch.save(state, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp_sharded_training_equals_single_process_training(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available in this build")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # fork: the children reuse the parent's imports (spawn would re-import torch twice, ~10 s on 2 cores)
        mp.start_processes(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, start_method="fork")
    torch.manual_seed(0)
    model = rpn2c.compile_file(SPEC).double()
    _steps(model, *_batch())
    ref = model.state_dict()
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert got.keys() == ref.keys()
        for k in ref:
            assert torch.allclose(got[k], ref[k], rtol=0, atol=1e-12), k


@pytest.mark.slow
def test_torchrun_fsdp_strategy_matches_ddp(tmp_path):
    from tests.train.test_train_ddp import torchrun

    _, (d0, _) = torchrun(tmp_path / "ddp")
    _, (f0, f1) = torchrun(tmp_path / "fsdp", "--strategy", "fsdp")
    assert all(torch.equal(f0[k], f1[k]) for k in f0)
    assert all(torch.allclose(f0[k], d0[k], atol=1e-6) for k in d0)
