"""Functions kept out of TorchDynamo's tracing without importing ``torch._dynamo`` where nothing is compiled."""

from __future__ import annotations

import functools
import sys


def untraced(fn):
    """``fn`` kept out of dynamo's tracing (``torch.compiler.disable``, as ``torch.library.custom_op`` keeps an op's
    implementation) without that decorator's import of ``torch._dynamo`` (seconds) where nothing is compiled: until
    something imports dynamo nothing traces, and the first call after that wraps ``fn`` in
    ``torch.compiler.disable`` (under tracing that call is a graph break, run eagerly)."""
    disabled = None

    @functools.wraps(fn)
    def call(*args, **kwargs):
        nonlocal disabled
        if disabled is None:
            if "torch._dynamo" not in sys.modules:
                return fn(*args, **kwargs)
            import torch

            disabled = torch.compiler.disable(fn)
        return disabled(*args, **kwargs)

    return call
