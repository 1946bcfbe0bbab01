"""The built-in converters (importing this module registers them; torch_geometric's once it is imported)."""

from rpn2c.frontends import convert_attention, convert_decoder, convert_layers, convert_recurrent
from rpn2c.frontends.kit import _lazy


def _register_graph() -> None:
    from rpn2c.frontends import convert_graph

    convert_graph.register_all()


convert_layers.register_all()
convert_attention.register_all()
convert_decoder.register_all()
convert_recurrent.register_all()
_lazy("torch_geometric.nn", _register_graph)
