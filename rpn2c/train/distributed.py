"""Multi-process training under ``torchrun``: process group set-up, DDP/FSDP wrapping, samplers, rank-0 writes.

``torchrun --nproc_per_node=K -m rpn2c train ...`` sets ``WORLD_SIZE``/``RANK``/``LOCAL_RANK``/``MASTER_*``; the
group uses gloo on CPU and nccl on CUDA (process r drives ``cuda:LOCAL_RANK``). DDP broadcasts rank 0's initial
weights and all-reduces (averages) gradients, so every rank holds the same weights after every step. FSDP
(``fully_shard``, FSDP2) shards each layer's parameters and the root module across the ranks.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

RANK_STATE_ENV = "RPN2C_RANK_STATE_DIR"  # when set, every rank saves its final state_dict as DIR/rank<r>.pt


@dataclass(frozen=True)
class DistEnv:
    """World size, global rank and local rank read from torchrun's environment (1, 0, 0 without it)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> DistEnv:
        get = os.environ.get
        return cls(int(get("WORLD_SIZE", "1")), int(get("RANK", "0")), int(get("LOCAL_RANK", "0")))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(name: str, env: DistEnv) -> torch.device:
    """``auto`` → ``cuda:LOCAL_RANK`` when CUDA is available, else CPU; a bare ``cuda`` gets the local rank."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)  # RuntimeError for an unknown device string
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available in this torch build or machine (use --device cpu)")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", env.local_rank if env.distributed else torch.cuda.current_device())
    return device


def init(env: DistEnv, device: torch.device) -> bool:
    """Join the process group (nccl for CUDA, gloo otherwise) when running under torchrun; True if this call
    created it (the caller then calls :func:`cleanup`)."""
    if not env.distributed or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return True


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum of ``t`` over all ranks (``t`` itself outside a process group)."""
    if dist.is_initialized():
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def wrap(model: nn.Module, strategy: str, device: torch.device) -> nn.Module:
    """The module to train: ``model`` itself in one process, DDP around it, or ``model`` sharded in place by
    FSDP2 (each compiled layer is one shard unit, then the root)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return model
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        # compiled layers return views (e.g. a squeezed item axis); nothing here modifies them in place
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")

        from rpn2c.lower.heads import LayerModule

        if hasattr(model, "emit"):
            model.emit(inline=False)  # FSDP gathers each layer's parameters in that layer's forward pre-hook
        for module in [m for m in model.modules() if isinstance(m, LayerModule)]:
            fully_shard(module)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def unwrap(module: nn.Module) -> nn.Module:
    """The user's model inside DDP / ``torch.compile`` wrappers."""
    while True:
        inner = getattr(module, "module", None) if type(module).__name__ == "DistributedDataParallel" else None
        inner = inner if inner is not None else getattr(module, "_orig_mod", None)
        if inner is None:
            return module
        module = inner


def full_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded CPU copy of the weights, on every rank (FSDP parameters are gathered)."""
    model = unwrap(module)
    if _sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    else:
        sd = model.state_dict()
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in sd.items()}


def _sharded(model: nn.Module) -> bool:
    return any(type(p).__name__ == "DTensor" for p in model.parameters())


def _cpu(value):
    """A CPU copy of the tensors in a nested dict/list (optimiser states share storage with live tensors)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu(v) for v in value)
    return value


def optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The optimiser's state on the CPU, on every rank: ``opt.state_dict()``, or for FSDP-sharded parameters the
    gathered full state keyed by parameter name (a collective: every rank calls it)."""
    if _sharded(unwrap(model)):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return _cpu(get_optimizer_state_dict(unwrap(model), opt, options=StateDictOptions(full_state_dict=True)))
    return _cpu(opt.state_dict())


def load_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    """Load what :func:`optimizer_state` returned (every rank passes the same full state)."""
    if _sharded(unwrap(model)):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(unwrap(model), opt, state, options=StateDictOptions(full_state_dict=True))
        return
    opt.load_state_dict(state)


def save_rank_state(state: dict[str, torch.Tensor], env: DistEnv) -> Path | None:
    """When ``$RPN2C_RANK_STATE_DIR`` is set, save this rank's weights there (for equal-weight checks)."""
    folder = os.environ.get(RANK_STATE_ENV)
    if not folder:
        return None
    path = Path(folder) / f"rank{env.rank}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return path
