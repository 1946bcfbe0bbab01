"""Small sequence models written as the common tutorials write them, torch_geometric GNNs as PyG's examples write
them, Hadamard-family blocks as written in the wild and two kinds of weight sharing, for the model catalog
(test_model_catalog.py). Widths are at most 16; each model has one or two blocks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ------------------------------------------------------------------------------------------------ sequence models
class LSTMClassifier(nn.Module):
    """Embedding → LSTM → Linear on the last layer's final hidden state."""

    def __init__(self, vocab=20, emb=8, hidden=8, n_classes=3):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, text):
        embedded = self.embedding(text)
        output, (hidden, cell) = self.lstm(embedded)
        return self.fc(hidden[-1])


class BiGRUTagger(nn.Module):
    """Embedding → bidirectional GRU → a tag score per token."""

    def __init__(self, vocab=20, emb=8, hidden=6, n_tags=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, n_tags)

    def forward(self, tokens):
        out, _ = self.gru(self.embedding(tokens))
        return self.fc(out)


class TextCNN(nn.Module):
    """Kim's CNN: [B, T, E] → permute → Conv1d per filter size → ReLU → max over time → cat → Linear."""

    def __init__(self, vocab=20, emb=8, n_filters=4, filter_sizes=(2, 3), n_classes=3, dropout=0.5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.convs = nn.ModuleList([nn.Conv1d(emb, n_filters, fs) for fs in filter_sizes])
        self.fc = nn.Linear(len(filter_sizes) * n_filters, n_classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, text):
        embedded = self.embedding(text).permute(0, 2, 1)
        conved = [F.relu(conv(embedded)) for conv in self.convs]
        pooled = [F.max_pool1d(conv, conv.shape[2]).squeeze(2) for conv in conved]
        return self.fc(self.dropout(torch.cat(pooled, dim=1)))


class TransformerClassifier(nn.Module):
    """Token + learned position embeddings (``self.pos(torch.arange(t))``) → TransformerEncoder → mean → Linear."""

    def __init__(self, vocab=20, d=8, heads=2, ff=16, layers=1, max_len=16, n_classes=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, heads, ff, batch_first=True), layers,
                                             enable_nested_tensor=False)
        self.fc = nn.Linear(d, n_classes)

    def forward(self, ids):
        b, t = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        return self.fc(self.encoder(x).mean(dim=1))


class BertLike(nn.Module):
    """BERT-style: token + position embeddings, LayerNorm, an encoder with the padding mask ``ids.eq(pad)``, the
    first token's state → Linear."""

    def __init__(self, vocab=20, d=8, heads=2, ff=16, layers=1, max_len=16, n_classes=3, pad=0):
        super().__init__()
        self.pad = pad
        self.tok = nn.Embedding(vocab, d, padding_idx=pad)
        self.pos = nn.Embedding(max_len, d)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.cls = nn.Linear(d, n_classes)

    def forward(self, ids):
        mask = ids.eq(self.pad)
        pos = torch.arange(ids.size(1), device=ids.device).unsqueeze(0)
        x = self.norm(self.tok(ids) + self.pos(pos))
        x = self.encoder(x, src_key_padding_mask=mask)
        return self.cls(x[:, 0])


class GPTLike(nn.Module):
    """GPT-style: token + position embeddings, pre-norm blocks under the causal mask
    ``torch.ones(t, t).triu(1).bool()``, a final LayerNorm and an LM head."""

    def __init__(self, vocab=16, d=8, heads=2, ff=16, layers=2, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, batch_first=True, norm_first=True, activation="gelu")
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        t = ids.size(1)
        mask = torch.ones(t, t, device=ids.device).triu(1).bool()
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        x = self.blocks(x, mask=mask)
        return self.head(self.ln_f(x))


class PositionalEncoding(nn.Module):
    """The translation tutorial's sinusoidal positions: a buffer sliced to the sequence length."""

    def __init__(self, emb_size, dropout, maxlen=32):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(0))

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[:, :token_embedding.size(1)])


class Seq2SeqTransformer(nn.Module):
    """nn.Transformer between two token sequences, the target under
    ``nn.Transformer.generate_square_subsequent_mask``, scaled embeddings, sinusoidal positions, a generator."""

    def __init__(self, src_vocab=16, tgt_vocab=12, d=8, heads=2, ff=16, dropout=0.1):
        super().__init__()
        self.d = d
        self.transformer = nn.Transformer(d_model=d, nhead=heads, num_encoder_layers=1, num_decoder_layers=1,
                                          dim_feedforward=ff, dropout=dropout, batch_first=True)
        self.src_tok_emb = nn.Embedding(src_vocab, d)
        self.tgt_tok_emb = nn.Embedding(tgt_vocab, d)
        self.positional_encoding = PositionalEncoding(d, dropout)
        self.generator = nn.Linear(d, tgt_vocab)

    def forward(self, src, tgt):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        src_emb = self.positional_encoding(self.src_tok_emb(src) * math.sqrt(self.d))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(tgt) * math.sqrt(self.d))
        outs = self.transformer(src_emb, tgt_emb, tgt_mask=tgt_mask)
        return self.generator(outs)


# ------------------------------------------------------------------------------------------------ GNNs (PyG)
def gcn(in_c=5, hidden=8, out=3):
    from torch_geometric.nn import GCNConv

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(in_c, hidden)
            self.conv2 = GCNConv(hidden, out)

        def forward(self, x, edge_index):
            x = F.dropout(x, p=0.5, training=self.training)
            x = self.conv1(x, edge_index).relu()
            x = F.dropout(x, p=0.5, training=self.training)
            return self.conv2(x, edge_index)

    return GCN()


def gat(in_c=5, hidden=4, out=3, heads=2):
    from torch_geometric.nn import GATConv

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GATConv(in_c, hidden, heads, dropout=0.6)
            self.conv2 = GATConv(hidden * heads, out, heads=1, concat=False, dropout=0.6)

        def forward(self, x, edge_index):
            x = F.dropout(x, p=0.6, training=self.training)
            x = F.elu(self.conv1(x, edge_index))
            x = F.dropout(x, p=0.6, training=self.training)
            return self.conv2(x, edge_index)

    return GAT()


def graphsage(in_c=5, hidden=8, out=3):
    from torch_geometric.nn import SAGEConv

    class GraphSAGE(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([SAGEConv(in_c, hidden), SAGEConv(hidden, out)])

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = x.relu()
                    x = F.dropout(x, p=0.5, training=self.training)
            return x.log_softmax(dim=-1)

    return GraphSAGE()


def gin(in_c=5, hidden=8, out=3):
    from torch_geometric.nn import GINConv

    class GIN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GINConv(nn.Sequential(nn.Linear(in_c, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                               nn.Linear(hidden, hidden), nn.ReLU()))
            self.conv2 = GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                               nn.Linear(hidden, hidden), nn.ReLU()))
            self.lin = nn.Linear(hidden, out)

        def forward(self, x, edge_index):
            x = self.conv1(x, edge_index)
            x = self.conv2(x, edge_index)
            return self.lin(x)

    return GIN()


# ------------------------------------------------------------------------------------------------ Hadamard family
class FeedForward(nn.Module):
    """LLaMA's SwiGLU feed-forward: ``w2(silu(w1(x)) * w3(x))``, hidden size rounded to ``multiple_of``."""

    def __init__(self, dim=8, hidden_dim=16, multiple_of=4, ffn_dim_multiplier=None):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        if ffn_dim_multiplier is not None:
            hidden_dim = int(ffn_dim_multiplier * hidden_dim)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GLUBlock(nn.Module):
    """A gated linear unit: one projection to twice the width, ``a, b = chunk(2)``, ``a * sigmoid(b)``, an output
    projection and a residual."""

    def __init__(self, d=8, hidden=8):
        super().__init__()
        self.proj = nn.Linear(d, 2 * hidden)
        self.out = nn.Linear(hidden, d)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return x + self.out(a * torch.sigmoid(b))


# ------------------------------------------------------------------------------------------------ weight sharing
class TiedLM(nn.Module):
    """PyTorch's word-language-model example with ``tie_weights``: the decoder's weight is the encoder's."""

    def __init__(self, ntoken=16, ninp=8):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, ninp, batch_first=True)
        self.decoder = nn.Linear(ninp, ntoken)
        self.decoder.weight = self.encoder.weight

    def forward(self, input):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb)
        output = self.drop(output)
        return F.log_softmax(self.decoder(output), dim=-1)


class AlbertLike(nn.Module):
    """ALBERT-style: factorised embedding, one TransformerEncoderLayer applied three times, first token → Linear."""

    def __init__(self, vocab=20, e=4, d=8, heads=2, ff=16, n_layers=3, n_classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, e)
        self.proj = nn.Linear(e, d)
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, batch_first=True)
        self.n_layers = n_layers
        self.cls = nn.Linear(d, n_classes)

    def forward(self, ids):
        x = self.proj(self.emb(ids))
        for _ in range(self.n_layers):
            x = self.layer(x)
        return self.cls(x[:, 0])


class TiedAutoencoder(nn.Module):
    """The decoder reuses the encoder's weight transposed: ``F.linear(h, self.enc.weight.t(), self.dec_bias)``."""

    def __init__(self, n=10, h=4):
        super().__init__()
        self.enc = nn.Linear(n, h)
        self.dec_bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        h = torch.sigmoid(self.enc(x))
        return torch.sigmoid(F.linear(h, self.enc.weight.t(), self.dec_bias))
