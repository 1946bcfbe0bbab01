"""Training settings (a pydantic model, stored in checkpoints as a plain dict); the error types are in
:mod:`rpn2c.train.errors`."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .defaults import DEFAULTS as _D
from .errors import BindError, CheckpointMismatch, TrainError  # noqa: F401  (their old home)

Scalar = Union[bool, int, float, str]  # bool first: pydantic's smart union keeps true/false booleans
ParamValue = Union[Scalar, list[Scalar]]


class TrainConfig(BaseModel):
    """Everything that decides a training run. ``seed`` draws the data split, the initial weights, the batch
    order and dropout, so a run is reproduced by its config on the same device.

    Optimiser: AdamW(lr, weight_decay) with a cosine decay of the learning rate to 0 over all steps
    (``schedule="cosine"``) or a constant rate (``"constant"``). ``batch_size`` is per process (the global batch
    under ``torchrun`` is ``batch_size × world_size``). Node-classification graphs train full-batch.
    ``threads`` defaults to 1: the shipped models are small, and intra-op threads cost more than they gain there
    (on busy shared cores two threads made an epoch of cnn.rpn 40x slower than one).
    ``val_fraction`` of the training data is held out (stratified by class; the last part of a time series;
    nodes of the training mask) and scored after every epoch; the test split is read only after training.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)  # the schema is built when first validated

    data: str = Field(_D["data"], description="built-in dataset name, or KIND:PATH for a user file")
    data_options: dict[str, int | float | bool | str] = Field(
        default_factory=dict, description="options of the user-file loader (KIND:PATH), e.g. window=12")
    epochs: int = Field(_D["epochs"], ge=1)
    batch_size: int = Field(_D["batch_size"], ge=1)
    lr: float = Field(_D["lr"], gt=0)
    weight_decay: float = Field(_D["weight_decay"], ge=0)
    schedule: Literal["cosine", "constant"] = _D["schedule"]
    seed: int = _D["seed"]
    device: str = Field(_D["device"], description="auto (cuda when available), cpu, cuda, cuda:1, ...")
    compile: bool = Field(_D["compile"], description="wrap the model with torch.compile")
    strategy: Literal["auto", "ddp", "fsdp"] = Field(_D["strategy"], description="multi-process strategy (auto = ddp)")
    eval_batch_size: int = Field(_D["eval_batch_size"], ge=1)
    threads: int = Field(_D["threads"], ge=0, description="torch intra-op CPU threads per process (0: torch's default)")
    val_fraction: float = Field(_D["val_fraction"], ge=0, lt=1, description="share of the training data held out for validation")
    patience: int | None = Field(_D["patience"], ge=1, description="stop after this many epochs without a better "
                                                          "validation metric (None: never)")
    params: dict[str, ParamValue] = Field(default_factory=dict, description="model parameters, as rpn2c.compile's "
                                                                            "params=")
    objective: Literal["task", "mlm"] = Field(_D["objective"], description="the dataset's task, or the masked-LM objective "
                                                                  "on its token ids (rpn2c.train.mlm)")
    mask_rate: float = Field(_D["mask_rate"], gt=0, lt=1, description="mlm: share of the positions predicted")
    mask_id: int | None = Field(_D["mask_id"], ge=0, description="mlm: the [MASK] id (None: the last output id, V − 1)")

    @model_validator(mode="after")
    def _patience_needs_validation(self) -> TrainConfig:
        if self.patience is not None and self.val_fraction == 0:
            raise ValueError("patience (early stopping) needs a validation split: val_fraction > 0")
        return self


class RunConfig(TrainConfig):
    """A whole ``rpn2c train`` invocation: the training settings plus the spec and where the outputs go
    (what ``run.yaml`` holds; relative paths in a config file are relative to the file's folder)."""

    spec: str | None = Field(None, description="the .rpn file")
    model: str | None = Field(None, description="which model of the file (None: the last one)")
    root: str | None = Field(None, description="project root that imports may not leave")
    out: str | None = Field(None, description="output folder (None: runs/<spec-stem>-<data>/)")
    metrics_out: str | None = Field(None, description="JSON-lines file of the epoch records")
    quiet: bool = Field(False, description="no progress bar or per-epoch lines")

    def train_config(self) -> TrainConfig:
        return TrainConfig(**self.model_dump(include=set(TrainConfig.model_fields)))
