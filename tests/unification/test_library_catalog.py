"""The library catalog: small models built from the real classes of the libraries people use (torch_geometric's model
classes, transformers' models) come back through ``rpn2c.from_torch`` as the same trainable model.

Each model is built with a seed from a small random config (nothing downloaded), converted, compiled in both
lowerings and compared in float64 by ``assert_same_model``: the output, the gradients with respect to the floating
inputs, the parameter gradients mapped back to the library's names, and the number of free parameters. A model
that does not convert stays listed with the located error it hits (a strict xfail), so what still refuses is
explicit. docs/unification.md ("Library models") shows the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch
from convert_checks import assert_same_model
from torch import nn
from unification_helpers import rand

from rpn2c.frontends import TorchImportError


@dataclass(frozen=True)
class Case:
    package: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    refuses: str | None = None  # the located error while the model does not convert
    slow: bool = False
    # the reference lowering's tolerance where the library computes in float32 inside a float64 model and the
    # reference's per-head arithmetic rounds those float32 gradients differently (the default lowering: exact)
    reference_tol: float | None = None


def _graph(n=7, f=5):
    """Node features [N, F] and a ring with two chords, both directions."""
    src = list(range(n)) + [0, 2]
    dst = [(i + 1) % n for i in range(n)] + [3, 5]
    ei = torch.tensor([src + dst, dst + src])
    return lambda: (rand(n, f, seed=1), ei)


def _pyg(name: str, layers: int = 3, **kw) -> Callable[[], nn.Module]:
    def build():
        from torch_geometric.nn import models

        torch.manual_seed(0)
        return getattr(models, name)(5, 8, num_layers=layers, out_channels=3, **kw)
    return build


def _pyg_mlp():
    from torch_geometric.nn import models

    torch.manual_seed(0)
    return models.MLP([5, 8, 8, 3], norm="batch_norm", dropout=0.1)


class _TwoConvs(nn.Module):
    """A user's model of two torch_geometric convs around a ReLU: ``conv(5 -> 8)``, ``conv(8 -> 3)``."""

    def __init__(self, conv: str, **kw):
        super().__init__()
        from torch_geometric import nn as gnn

        self.conv1, self.conv2 = getattr(gnn, conv)(5, 8, **kw), getattr(gnn, conv)(8, 3, **kw)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def _two_convs(conv: str, **kw) -> Callable[[], nn.Module]:
    def build():
        torch.manual_seed(0)
        return _TwoConvs(conv, **kw)
    return build


def _hf(config: str, model: str, model_kwargs: dict | None = None, **kw) -> Callable[[], nn.Module]:
    """A transformers model from a small random config (nothing downloaded)."""
    def build():
        import transformers

        torch.manual_seed(0)
        cls = getattr(transformers, model)
        return cls(getattr(transformers, config)(**kw), **(model_kwargs or {}))
    return build


def _ids(vocab=50, t=6):
    return lambda: (torch.randint(1, vocab, (2, t), generator=torch.Generator().manual_seed(3)),)


def _padding(t=6):
    """An attention mask [B, T] (1 = attend) with the second sequence right-padded after 4 tokens."""
    mask = torch.ones(2, t, dtype=torch.long)
    mask[1, 4:] = 0
    return mask


def _ids_and_types(vocab=50, t=6):
    """BERT's inputs: the token ids, its padding mask and the token type ids given by name (the library fills
    zeros from a buffer when they are left out, a tensor made in forward that the spec cannot hold)."""
    return lambda: (*_ids(vocab, t)(), {"attention_mask": _padding(t),
                                        "token_type_ids": torch.zeros(2, t, dtype=torch.long)})


def _gpt2_mlp():
    """GPT-2's feed-forward block: two ``Conv1D`` (``addmm`` with a weight [in, out]) around GELU."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    torch.manual_seed(0)
    return GPT2MLP(32, GPT2Config(n_embd=8, activation_function="gelu", resid_pdrop=0.1))


def _xt(layers: str, **kw) -> Callable[[], nn.Module]:
    """An x-transformers ``TransformerWrapper`` over 2 layers of ``Encoder`` / ``Decoder`` (its defaults otherwise)."""
    def build():
        import x_transformers

        torch.manual_seed(0)
        attn = getattr(x_transformers, layers)(dim=16, depth=2, heads=2, **kw)
        return x_transformers.TransformerWrapper(num_tokens=50, max_seq_len=16, attn_layers=attn)
    return build


_XT_ROTARY = "x-transformers' RotaryEmbedding: disable_autocast looks for a tensor argument with torch.is_tensor"

CASES: dict[str, Case] = {
    "pyg_gcn": Case("torch_geometric", _pyg("GCN"), _graph()),
    "pyg_gat": Case("torch_geometric", _pyg("GAT", heads=2), _graph()),
    "pyg_graphsage": Case("torch_geometric", _pyg("GraphSAGE"), _graph()),
    "pyg_gin": Case("torch_geometric", _pyg("GIN"), _graph()),
    "pyg_gcn_jk_cat": Case("torch_geometric", _pyg("GCN", jk="cat"), _graph()),
    "pyg_gin_batch_norm": Case("torch_geometric", _pyg("GIN", 2, norm="batch_norm"), _graph()),
    "pyg_gcn_node_layer_norm": Case("torch_geometric", _pyg("GCN", 2, norm="layer_norm",
                                                            norm_kwargs={"mode": "node"}), _graph()),
    "pyg_mlp": Case("torch_geometric", _pyg_mlp, lambda: (rand(4, 5, seed=2),)),
    "pyg_graphconv": Case("torch_geometric", _two_convs("GraphConv"), _graph()),
    "pyg_chebnet": Case("torch_geometric", _two_convs("ChebConv", K=3), _graph()),
    "pyg_gat_v2": Case("torch_geometric", _pyg("GAT", 2, v2=True), _graph(),
                       refuses="GATv2Conv: its score aᵀ LeakyReLU(W_s x_j + W_t x_i) is no graph_attention form"),
    "pyg_transformer_conv": Case("torch_geometric", _two_convs("TransformerConv", heads=2, concat=False), _graph(),
                                 refuses="TransformerConv: the value bias inside the edge softmax has no head slot"),
    "pyg_graphsage_max": Case("torch_geometric", _pyg("GraphSAGE", 2, aggr="max"), _graph(),
                              refuses="SAGEConv aggr='max': the graph ξ aggregates by a (normalised) sum"),
    "pyg_gcn_graph_layer_norm": Case("torch_geometric", _pyg("GCN", 2, norm="layer_norm"), _graph(),
                                     refuses="LayerNorm mode='graph': a graph-wide normalisation"),
    "hf_gpt2_mlp": Case("transformers", _gpt2_mlp, lambda: (rand(2, 5, 8, seed=4),)),
    "hf_bert": Case("transformers", _hf("BertConfig", "BertModel", {"add_pooling_layer": False}, vocab_size=50,
                                        hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=32, max_position_embeddings=16),
                    _ids_and_types(), slow=True),
    "hf_vit": Case("transformers", _hf("ViTConfig", "ViTModel", {"add_pooling_layer": False}, image_size=8,
                                       patch_size=4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=32),
                   lambda: (rand(2, 3, 8, 8, seed=1),), slow=True),
    "hf_gpt2": Case("transformers", _hf("GPT2Config", "GPT2Model", vocab_size=50, n_embd=16, n_layer=2, n_head=2,
                                        n_positions=16), _ids(), slow=True),
    "hf_llama": Case("transformers", _hf("LlamaConfig", "LlamaModel", vocab_size=50, hidden_size=16,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         intermediate_size=32, max_position_embeddings=16), _ids()),
    "hf_llama_padded": Case("transformers", _hf("LlamaConfig", "LlamaModel", vocab_size=50, hidden_size=16,
                                                num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                                intermediate_size=32, max_position_embeddings=16),
                            lambda: (*_ids()(), {"attention_mask": _padding()}), slow=True),
    "hf_qwen2": Case("transformers", _hf("Qwen2Config", "Qwen2Model", vocab_size=50, hidden_size=16,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         intermediate_size=32, max_position_embeddings=16), _ids(), slow=True),
    # Qwen3's q/k norms run in float32 (Qwen3RMSNorm's upcast): qk_norm_upcast, exact in the default lowering
    "hf_qwen3": Case("transformers", _hf("Qwen3Config", "Qwen3Model", vocab_size=50, hidden_size=16,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=4, intermediate_size=32, max_position_embeddings=16), _ids(),
                     slow=True, reference_tol=1e-5),
    "hf_mistral": Case("transformers", _hf("MistralConfig", "MistralModel", vocab_size=50, hidden_size=16,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                           intermediate_size=32, max_position_embeddings=16), _ids(), slow=True),
    "hf_t5_encoder": Case("transformers", _hf("T5Config", "T5EncoderModel", vocab_size=50, d_model=16, d_kv=8,
                                              d_ff=32, num_layers=2, num_heads=2), _ids(), slow=True),
    "hf_t5_encoder_padded": Case("transformers", _hf("T5Config", "T5EncoderModel", vocab_size=50, d_model=16,
                                                     d_kv=8, d_ff=32, num_layers=2, num_heads=2),
                                 lambda: (*_ids()(), {"attention_mask": _padding()}), slow=True),
    "xt_encoder_flash": Case("x_transformers", _xt("Encoder", attn_flash=True), _ids(), slow=True),
    "xt_decoder_flash": Case("x_transformers", _xt("Decoder", attn_flash=True), _ids(), slow=True),
    "xt_encoder": Case("x_transformers", _xt("Encoder"), _ids(), slow=True),  # float32 softmax: softmax_upcast
    "xt_decoder": Case("x_transformers", _xt("Decoder"), _ids(), slow=True),
    "xt_decoder_rotary": Case("x_transformers", _xt("Decoder", attn_flash=True, rotary_pos_emb=True), _ids(),
                              refuses=_XT_ROTARY, slow=True),
}


def _params():
    for name, case in CASES.items():
        marks = [pytest.mark.slow] if case.slow else []
        if case.refuses:
            marks.append(pytest.mark.xfail(raises=TorchImportError, strict=True, reason=case.refuses))
        yield pytest.param(case, id=name, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_library_model_converts_equal(case: Case):
    pytest.importorskip(case.package)
    inputs = case.inputs()
    named = isinstance(inputs[-1], dict)  # tensors passed by name come last, as a dict
    args, kwargs = (inputs[:-1], inputs[-1]) if named else (inputs, None)
    if case.reference_tol is None:
        assert_same_model(case.build(), args, kwargs)
        return
    assert_same_model(case.build(), args, kwargs, references=(False,))
    assert_same_model(case.build(), args, kwargs, references=(True,), rtol=case.reference_tol,
                      atol=case.reference_tol)
