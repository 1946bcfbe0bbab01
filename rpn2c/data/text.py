"""Text classification data a user brings, and a frozen pretrained embedding table read from a GloVe file.

``--data text:PATH`` reads, for ``PATH``:

* a folder with ``train/`` and ``test/`` sub-folders holding one folder per class of text files (IMDB's
  ``aclImdb``: the classes are the folders present in both, so ``train/unsup`` is skipped);
* a folder with ``train.csv`` / ``train.tsv`` and ``test.*`` (``dev.*`` / ``validation.*`` / ``valid.*`` when
  there is no labelled ``test.*``, as in GLUE's SST-2, whose test file has no labels);
* one CSV/TSV file or one folder of class folders: a seeded stratified ``test_fraction`` is the test split.

A table row is ``label, text...``: with a header naming a label column (``label``, ``class``, ``sentiment``, ...)
and text columns (``text``, ``sentence``, ``review``, ``title``, ``description``, ...) those are used; without one
the first column is the label and the others, joined by a space, the text (AG News' ``class, title,
description``). ``.tsv`` files are tab separated without quoting, ``.csv`` files comma separated with quotes.
Labels are classes in sorted order (numerically when every label is an integer: AG News 1..4 become 0..3).

Tokenisation (`tokenize`): HTML tags such as ``<br />`` become spaces, the text is lower-cased, and a token is a
run of letters/digits/underscores or one other non-space character: ``"Don't stop!"`` -> ``don ' t stop !``.
Vocabulary: the training split's tokens by falling count (ties alphabetical), only those with a vector when an
embedding is given, at most ``vocab``; id 0 pads, id 1 is every other (unknown) token, words take ids 2, 3, ...
Each text becomes its first ``length`` ids, padded with 0 at the end.

``embedding="glove:FILE"`` reads a GloVe text file (``word v_1 ... v_d`` per line; gzip or not; a word2vec
``count dim`` first line is skipped) into ``meta["embedding"]``: a float32 table ``[vocab + 2, d]`` whose word rows
are the file's vectors and whose pad and unknown rows are zero. Training looks the ids up in this table as data
(``rpn2c.train.binding``): it is never a model parameter, so it stays exactly the file's vectors.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .dataset import Dataset, stratified_split

PathLike = str | os.PathLike[str]
PAD, UNK = 0, 1
LABEL_COLUMNS = ("label", "labels", "class", "category", "sentiment", "polarity", "target", "y")
TEXT_COLUMNS = ("text", "sentence", "sentence1", "review", "content", "title", "description", "document", "body")
_OTHER_HEADER = ("id", "index", "idx")
_TABLE_SUFFIXES = (".csv", ".tsv", ".tab")
_TEST_NAMES = ("test", "dev", "validation", "valid")
_TAG = re.compile(r"<[^<>]{0,40}>")
_TOKEN = re.compile(r"\w+|[^\w\s]")
TOKENIZER = "HTML tags removed, lower-cased, tokens = \\w+ runs or single other non-space characters"


def tokenize(text: str) -> list[str]:
    """``text`` as tokens (the module docstring's rule)."""
    return _TOKEN.findall(_TAG.sub(" ", text).lower())


# ----------------------------------------------------------------------------------------------------- reading
def _delimiter(path: Path, first_line: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".tab"):
        return "\t"
    if suffix == ".csv":
        return ","
    return "\t" if "\t" in first_line else ","


def _header(fields: list[str]) -> bool:
    """A header row: every field a short name, one of them a known column name."""
    names = [f.strip().lower() for f in fields]
    return (all(re.fullmatch(r"[a-z_][\w ]{0,30}", n) for n in names)
            and bool(set(names) & set(LABEL_COLUMNS + TEXT_COLUMNS + _OTHER_HEADER)))


def _open_text(path: Path) -> io.TextIOBase:
    raw = path.open("rb")
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    stream = gzip.open(raw) if head == b"\x1f\x8b" else raw
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")


def has_labels(path: PathLike) -> bool:
    """False when the table's header names no label column (GLUE's unlabelled test files), else True."""
    with _open_text(Path(path)) as fh:
        first = fh.readline()
    fields = first.rstrip("\r\n").split(_delimiter(Path(path), first))
    return not _header(fields) or any(f.strip().lower() in LABEL_COLUMNS for f in fields)


def read_table(path: PathLike) -> tuple[list[str], list[str]]:
    """(labels, texts) of a CSV/TSV file of ``label, text`` rows (the module docstring's rules); a row without a
    label or text raises ValueError naming ``FILE:LINE``."""
    p = Path(path)
    with _open_text(p) as fh:
        first = fh.readline()
        fh.seek(0)
        delim = _delimiter(p, first)
        quoting = csv.QUOTE_NONE if delim == "\t" else csv.QUOTE_MINIMAL
        reader = csv.reader(fh, delimiter=delim, quoting=quoting)
        labels: list[str] = []
        texts: list[str] = []
        label_col, text_cols = 0, None
        try:
            for row in reader:
                line = reader.line_num
                if not any(f.strip() for f in row):
                    continue
                if text_cols is None and not labels and _header(row):
                    names = [f.strip().lower() for f in row]
                    found = [i for i, n in enumerate(names) if n in LABEL_COLUMNS]
                    if not found:
                        raise ValueError(f"{p}:{line}: the header {row} names no label column (one of "
                                         f"{', '.join(LABEL_COLUMNS)}); a file without labels cannot train")
                    label_col = found[0]
                    text_cols = [i for i, n in enumerate(names) if n in TEXT_COLUMNS] or \
                        [i for i, n in enumerate(names) if i != label_col and n not in _OTHER_HEADER]
                    continue
                if text_cols is None:
                    text_cols = []  # headerless: the label, then every other column is text
                width = max([label_col, *text_cols]) + 1 if text_cols else 2
                if len(row) < width:
                    raise ValueError(f"{p}:{line}: expected a label and a text ({width} fields), got {len(row)}: "
                                     f"{delim.join(row)[:80]!r}")
                label = row[label_col].strip()
                if not label:
                    raise ValueError(f"{p}:{line}: empty label")
                labels.append(label)
                cols = text_cols or [i for i in range(len(row)) if i != label_col]
                texts.append(" ".join(row[i] for i in cols))
        except csv.Error as exc:
            raise ValueError(f"{p}:{reader.line_num}: {exc}") from None
    if not labels:
        raise ValueError(f"{p}: no labelled rows")
    return labels, texts


def read_class_folders(path: PathLike, classes: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(labels, texts) from one folder per class holding text files (``classes``: the folders to read)."""
    root = Path(path)
    folders = sorted(d.name for d in root.iterdir() if d.is_dir()) if classes is None else classes
    if not folders:
        raise FileNotFoundError(f"{root}: no class folders (expected {root}/<class>/<file>.txt)")
    labels, texts = [], []
    for c in folders:
        files = sorted(f for f in (root / c).iterdir() if f.is_file())
        if not files:
            raise ValueError(f"{root / c}: an empty class folder")
        for f in files:
            labels.append(c)
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
    return labels, texts


def _table_named(root: Path, stem: str) -> Path | None:
    found = [root / f"{stem}{s}" for s in _TABLE_SUFFIXES if (root / f"{stem}{s}").is_file()]
    return found[0] if found else None


def read_splits(path: PathLike) -> tuple[tuple[list[str], list[str]], tuple[list[str], list[str]] | None, str]:
    """((train labels, texts), (test labels, texts) or None when ``path`` has no test split, a description)."""
    p = Path(path)
    if p.is_file():
        return read_table(p), None, f"table {p.name}"
    if (p / "train").is_dir() and (p / "test").is_dir():
        classes = sorted(d.name for d in (p / "test").iterdir() if d.is_dir() and (p / "train" / d.name).is_dir())
        if not classes:
            raise FileNotFoundError(f"{p}: train/ and test/ share no class folders")
        return (read_class_folders(p / "train", classes), read_class_folders(p / "test", classes),
                f"class folders {', '.join(classes)}")
    train = _table_named(p, "train")
    if train is not None:
        for stem in _TEST_NAMES:
            test = _table_named(p, stem)
            if test is not None and has_labels(test):
                return read_table(train), read_table(test), f"tables {train.name}, {test.name}"
        raise FileNotFoundError(f"{p}: {train.name} but no labelled test.csv/.tsv (or dev.*, validation.*)")
    if any(d.is_dir() for d in p.iterdir()):
        return read_class_folders(p), None, "class folders"
    raise FileNotFoundError(f"{p}: expected train/ and test/ class folders, train.csv + test.csv (or .tsv), "
                            "one CSV/TSV file or one folder per class")


# ----------------------------------------------------------------------------------------------------- GloVe
def _glove_lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        fh = _open_text(path)
    except OSError as exc:
        raise FileNotFoundError(f"{path}: cannot read the embedding file ({exc.strerror or exc})") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\r\n").rstrip(" ")
            if line:
                yield lineno, line


def read_glove(path: PathLike, words: set[str] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """({word: float32 vector} for the file's words in ``words`` (None: all), the dimension d). Every line is
    checked to hold a word and d numbers (d from the first line); the first occurrence of a word wins; a
    malformed line raises ValueError naming ``FILE:LINE``."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such embedding file")
    dim = None
    vectors: dict[str, np.ndarray] = {}
    for lineno, line in _glove_lines(p):
        parts = line.split(" ")
        if dim is None:
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():  # word2vec text header
                dim = int(parts[1])
                continue
            dim = len(parts) - 1
            if dim < 1:
                raise ValueError(f"{p}:{lineno}: expected 'word v_1 ... v_d', got {line[:60]!r}")
        if len(parts) < dim + 1:
            raise ValueError(f"{p}:{lineno}: {len(parts) - 1} numbers after the word, the file's vectors have {dim}")
        word = " ".join(parts[:-dim])  # a few GloVe releases have words with spaces
        if not word:
            raise ValueError(f"{p}:{lineno}: a vector without a word")
        if (words is None or word in words) and word not in vectors:
            try:
                vectors[word] = np.asarray(parts[-dim:], dtype=np.float32)
            except ValueError:
                for v in parts[-dim:]:
                    try:
                        float(v)
                    except ValueError:
                        raise ValueError(f"{p}:{lineno}: {v!r} is not a number (word {word!r})") from None
                raise
    if dim is None:
        raise ValueError(f"{p}: empty embedding file")
    return vectors, dim


def parse_embedding(spec: str) -> Path:
    """The file of an ``--embedding`` value ``glove:FILE`` (ValueError for another kind)."""
    kind, sep, file = spec.partition(":")
    if not sep or kind != "glove" or not file:
        raise ValueError(f"embedding {spec!r}: expected glove:FILE (a GloVe text file: word then floats per line)")
    return Path(os.path.expanduser(file))


# -------------------------------------------------------------------------------------------------- assembling
def _class_order(labels: list[str]) -> list[str]:
    names = set(labels)
    if all(re.fullmatch(r"-?\d+", n) for n in names):
        return sorted(names, key=int)
    return sorted(names)


def build_vocab(texts: list[list[str]], size: int, known: set[str] | None = None) -> list[str]:
    """The ``size`` most frequent tokens of ``texts`` (ties alphabetical), only those in ``known`` when given."""
    counts = Counter(t for tokens in texts for t in tokens)
    ranked = sorted((w for w in counts if known is None or w in known), key=lambda w: (-counts[w], w))
    return ranked[:size]


def encode(texts: list[list[str]], index: dict[str, int], length: int) -> torch.Tensor:
    """int64 ``[n, length]``: each token's id (UNK when absent), truncated to ``length``, padded with PAD."""
    out = np.full((len(texts), length), PAD, dtype=np.int64)
    for i, tokens in enumerate(texts):
        ids = [index.get(t, UNK) for t in tokens[:length]]
        out[i, :len(ids)] = ids
    return torch.from_numpy(out)


def load_text(path: PathLike, *, length: int | None = None, vocab: int = 50_000, embedding: str | None = None,
              seed: int = 0, test_fraction: float = 0.2, name: str | None = None) -> Dataset:
    """Text classification: ``train``/``test`` are (int64 ids ``[n, length]``, int64 labels). ``length``
    defaults to the longest training text; ``vocab`` caps the vocabulary; ``embedding="glove:FILE"`` restricts it
    to words with a vector and puts the frozen table in ``meta["embedding"]`` (see the module docstring)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    (tr_labels, tr_texts), test, source = read_splits(p)
    classes = _class_order(tr_labels)
    lookup = {c: i for i, c in enumerate(classes)}
    tr_tokens = [tokenize(t) for t in tr_texts]
    y = np.asarray([lookup[c] for c in tr_labels], dtype=np.int64)
    if test is None:
        tr_idx, te_idx = stratified_split(y, test_fraction, seed)
        te_tokens, te_y = [tr_tokens[i] for i in te_idx], y[te_idx]
        tr_tokens, y = [tr_tokens[i] for i in tr_idx], y[tr_idx]
    else:
        unknown = sorted(set(test[0]) - set(lookup))
        if unknown:
            raise ValueError(f"{p}: test labels {unknown[:5]} do not occur in the training split")
        te_tokens = [tokenize(t) for t in test[1]]
        te_y = np.asarray([lookup[c] for c in test[0]], dtype=np.int64)
    if length is None:
        length = max(1, max(map(len, tr_tokens), default=1))
    if length < 1 or vocab < 1:
        raise ValueError(f"length and vocab must be >= 1, got length={length}, vocab={vocab}")
    meta: dict[str, Any] = {"source": str(p), "layout": source, "class_names": classes, "length": length,
                            "tokenizer": TOKENIZER, "pad_id": PAD, "unk_id": UNK, "seed": seed}
    vectors = None
    if embedding is not None:
        file = parse_embedding(embedding)
        wanted = {t for tokens in tr_tokens for t in tokens}
        vectors, dim = read_glove(file, wanted)
        words = build_vocab(tr_tokens, vocab, set(vectors))
        table = np.zeros((len(words) + 2, dim), dtype=np.float32)
        for i, w in enumerate(words, 2):
            table[i] = vectors[w]
        meta.update(embedding=torch.from_numpy(table), embedding_file=str(file))
        input_spec = f"sequence[B, {length}, {dim}]"
    else:
        words = build_vocab(tr_tokens, vocab)
        input_spec = f"tokens[B, {length}]"
    index = {w: i for i, w in enumerate(words, 2)}
    total = sum(map(len, tr_tokens))
    meta.update(vocab=words, vocab_size=len(words) + 2,
                coverage=sum(t in index for tokens in tr_tokens for t in tokens) / total if total else 0.0)
    return Dataset(name=name or p.stem, task="classification", train=(encode(tr_tokens, index, length),
                   torch.from_numpy(y)), test=(encode(te_tokens, index, length), torch.from_numpy(te_y)),
                   num_classes=len(classes), target_dim=None, input_spec=input_spec,
                   description=f"text classification from {p} ({source})", meta=meta)
