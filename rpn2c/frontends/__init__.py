"""Front ends: other model descriptions -> RPN 2 spec text (the stage before parsing).

``from_torch(module, example_inputs)`` turns a torch module into an equivalent ``.rpn`` spec plus its weights.
"""

from rpn2c.frontends import converters  # noqa: F401  (registers the built-in converters)
from rpn2c.frontends.torch_import import (
    Context,
    Link,
    TorchImportError,
    TorchSpec,
    Value,
    from_torch,
    register_converter,
)

__all__ = ["Context", "Link", "TorchImportError", "TorchSpec", "Value", "from_torch", "register_converter"]
