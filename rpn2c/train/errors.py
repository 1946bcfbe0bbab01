"""The training error types, apart from the settings' pydantic models (:mod:`rpn2c.train.config`): a command that
only loads a checkpoint catches them without building the training schemas."""

from __future__ import annotations


class TrainError(Exception):
    """A problem the user can fix (data that does not fit the spec, a checkpoint for another spec): exit 1."""


class BindError(TrainError):
    """The dataset's tensors do not fit the spec's inputs or output."""


class CheckpointMismatch(TrainError):
    """A checkpoint was trained on a different spec than the one it is loaded into."""
