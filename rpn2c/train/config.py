"""Training settings (a pydantic model, stored in checkpoints as a plain dict) and the training error types."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TrainError(Exception):
    """A problem the user can fix (data that does not fit the spec, a checkpoint for another spec): exit 1."""


class BindError(TrainError):
    """The dataset's tensors do not fit the spec's inputs or output."""


class CheckpointMismatch(TrainError):
    """A checkpoint was trained on a different spec than the one it is loaded into."""


class TrainConfig(BaseModel):
    """Everything that decides a training run. ``seed`` draws the data split, the initial weights, the batch
    order and dropout, so a run is reproduced by its config on the same device.

    Optimiser: AdamW(lr, weight_decay) with a cosine decay of the learning rate to 0 over all steps
    (``schedule="cosine"``) or a constant rate (``"constant"``). ``batch_size`` is per process (the global batch
    under ``torchrun`` is ``batch_size × world_size``). Node-classification graphs train full-batch.
    ``threads`` defaults to 1: the shipped models are small, and intra-op threads cost more than they gain there
    (on busy shared cores two threads made an epoch of cnn.rpn 40x slower than one).
    """

    model_config = ConfigDict(extra="forbid")

    data: str = Field("digits", description="built-in dataset name, or KIND:PATH for a user file")
    data_options: dict[str, int | float | bool | str] = Field(
        default_factory=dict, description="options of the user-file loader (KIND:PATH), e.g. window=12")
    epochs: int = Field(20, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    schedule: Literal["cosine", "constant"] = "cosine"
    seed: int = 0
    device: str = Field("auto", description="auto (cuda when available), cpu, cuda, cuda:1, ...")
    compile: bool = Field(False, description="wrap the model with torch.compile")
    strategy: Literal["auto", "ddp", "fsdp"] = Field("auto", description="multi-process strategy (auto = ddp)")
    eval_batch_size: int = Field(1024, ge=1)
    threads: int = Field(1, ge=0, description="torch intra-op CPU threads per process (0: torch's default)")
