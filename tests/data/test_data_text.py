"""``text:PATH`` data and GloVe tables: tiny files written here, exact ids and vectors, errors naming file:line."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.data import load_path, load_text, read_glove, tokenize
from rpn2c.data.text import PAD, UNK, build_vocab, encode, read_table

GLOVE = {"good": [1.0, 0.0, 0.5], "great": [0.9, 0.1, -0.25], "bad": [-1.0, 0.0, 0.0], "awful": [-0.9, 0.0, 0.1],
         "movie": [0.0, 1.0, 0.0], "!": [0.0, 0.0, 1.0]}


def write_glove(path, vectors=GLOVE, gz=False, header=False):
    lines = [f"{len(vectors)} {len(next(iter(vectors.values())))}"] if header else []
    lines += [w + " " + " ".join(repr(v) for v in vec) for w, vec in vectors.items()]
    text = "\n".join(lines) + "\n"
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def test_tokenize_rule():
    assert tokenize("Don't STOP!<br /><br />A  movie, 2 times") == \
        ["don", "'", "t", "stop", "!", "a", "movie", ",", "2", "times"]


def test_table_with_header_quotes_and_extra_columns(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text('id,text,label\n1,"good, great",pos\n2,"a ""bad"" one",neg\n')
    assert read_table(f) == (["pos", "neg"], ['good, great', 'a "bad" one'])


def test_headerless_table_joins_the_text_columns(tmp_path):
    f = tmp_path / "train.csv"  # AG News: "class","title","description"
    f.write_text('"3","Wall St.","Bears claw back"\n"1","Title","Body"\n')
    assert read_table(f) == (["3", "1"], ["Wall St. Bears claw back", "Title Body"])


def test_tsv_sst2_layout_skips_the_unlabelled_test_file(tmp_path):
    (tmp_path / "train.tsv").write_text('sentence\tlabel\nit \'s "good" \t1\nbad movie\t0\ngreat\t1\nawful\t0\n')
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\ngood movie\t1\nbad\t0\n")
    (tmp_path / "test.tsv").write_text("index\tsentence\n0\tno label here\n")
    ds = load_path("text", tmp_path, length=3)
    assert ds.meta["layout"] == "tables train.tsv, dev.tsv"
    assert ds.meta["class_names"] == ["0", "1"] and ds.test[1].tolist() == [1, 0]
    words = ds.meta["vocab"]
    ids = {w: i for i, w in enumerate(words, 2)}
    assert ds.test[0].tolist() == [[ids["good"], ids["movie"], PAD], [ids["bad"], PAD, PAD]]


def test_numeric_labels_sort_numerically(tmp_path):
    rows = "".join(f"{c},text {c}\n" for c in (10, 2, 1, 2, 10, 1))
    (tmp_path / "train.csv").write_text(rows)
    (tmp_path / "test.csv").write_text(rows)
    ds = load_text(tmp_path)
    assert ds.meta["class_names"] == ["1", "2", "10"] and ds.train[1].tolist() == [2, 1, 0, 1, 2, 0]


def test_imdb_folders_skip_unsup_and_keep_the_file_split(tmp_path):
    for split, docs in (("train", {"neg": ["bad movie", "awful"], "pos": ["good movie", "great!"],
                                   "unsup": ["unlabelled"]}),
                        ("test", {"neg": ["bad"], "pos": ["good great"]})):
        for label, texts in docs.items():
            (tmp_path / split / label).mkdir(parents=True)
            for i, t in enumerate(texts):
                (tmp_path / split / label / f"{i}_7.txt").write_text(t)
    ds = load_path("text", tmp_path)
    assert ds.meta["class_names"] == ["neg", "pos"] and ds.num_train == 4 and ds.num_test == 2
    assert ds.train[1].tolist() == [0, 0, 1, 1] and "unlabelled" not in ds.meta["vocab"]
    assert ds.meta["length"] == 2 and ds.input_spec == "tokens[B, 2]"


def test_single_file_gets_a_seeded_stratified_split(tmp_path):
    f = tmp_path / "all.csv"
    f.write_text("".join(f"{'ab'[i % 2]},w{i}\n" for i in range(20)))
    a, b = load_text(f, seed=3), load_text(f, seed=3)
    assert torch.equal(a.test[0], b.test[0]) and a.num_test == 4
    assert torch.bincount(a.test[1]).tolist() == [2, 2]


@settings(max_examples=30, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from("abcdefg"), max_size=9), min_size=1, max_size=8),
       size=st.integers(1, 8), length=st.integers(1, 6))
def test_vocab_and_encoding(docs, size, length):
    words = build_vocab(docs, size)
    counts = {w: sum(d.count(w) for d in docs) for w in set(sum(docs, []))}
    assert len(words) == min(size, len(counts))
    assert words == sorted(words, key=lambda w: (-counts[w], w))  # by count, ties alphabetical
    assert all(counts[w] >= counts[v] for w in words for v in counts if v not in words)
    index = {w: i for i, w in enumerate(words, 2)}
    ids = encode(docs, index, length)
    for row, doc in zip(ids.tolist(), docs):
        cut = doc[:length]
        assert row == [index.get(t, UNK) for t in cut] + [PAD] * (length - len(cut))


@pytest.mark.parametrize("gz, header", [(False, False), (True, True)])
def test_glove_table_rows_equal_the_file(tmp_path, gz, header):
    write_glove(tmp_path / "g.txt", gz=gz, header=header)
    (tmp_path / "train.csv").write_text("pos,good movie!\npos,good great zzz\nneg,bad awful\nneg,bad qqq\n")
    (tmp_path / "test.csv").write_text("pos,great unknownword\nneg,awful\n")
    ds = load_text(tmp_path, length=4, embedding=f"glove:{tmp_path / 'g.txt'}")
    table = ds.meta["embedding"]
    words = ds.meta["vocab"]
    assert "zzz" not in words and "qqq" not in words  # only words with a vector get an id
    assert table.shape == (len(words) + 2, 3) and table.dtype == torch.float32 and not table.requires_grad
    assert table[PAD].abs().sum() == 0 and table[UNK].abs().sum() == 0
    for i, w in enumerate(words, 2):
        np.testing.assert_array_equal(table[i].numpy(), np.float32(GLOVE[w]))  # the file's numbers, as float32
    vectors = table[ds.test[0]]  # the lookup training does: unknown words and padding are zero rows
    np.testing.assert_array_equal(vectors[0, 0].numpy(), np.float32(GLOVE["great"]))
    assert vectors[0, 1:].abs().sum() == 0
    assert ds.input_spec == "sequence[B, 4, 3]"


def test_glove_caps_the_vocabulary_by_training_count(tmp_path):
    write_glove(tmp_path / "g.txt")
    (tmp_path / "train.csv").write_text("a,bad bad bad good\nb,movie movie good\n")
    (tmp_path / "test.csv").write_text("a,bad\n")
    ds = load_text(tmp_path, vocab=2, embedding=f"glove:{tmp_path / 'g.txt'}")
    assert ds.meta["vocab"] == ["bad", "good"] and ds.meta["embedding"].shape == (4, 3)


@pytest.mark.parametrize("text, where", [
    ("good 1 0\nbad 1\n", "g.txt:2: 1 numbers after the word, the file's vectors have 2"),
    ("good 1 0\nbad 1 x\n", "g.txt:2: 'x' is not a number (word 'bad')"),
    ("\n", "g.txt: empty embedding file"),
])
def test_malformed_glove_names_file_and_line(tmp_path, text, where):
    (tmp_path / "g.txt").write_text(text)
    with pytest.raises(ValueError) as info:
        read_glove(tmp_path / "g.txt", {"good", "bad"})
    assert where in str(info.value)


def test_missing_and_misnamed_embedding(tmp_path):
    (tmp_path / "all.csv").write_text("a,x\nb,y\na,x\nb,y\n")
    with pytest.raises(FileNotFoundError, match="nope.txt: no such embedding file"):
        load_text(tmp_path / "all.csv", embedding=f"glove:{tmp_path / 'nope.txt'}")
    with pytest.raises(ValueError, match="expected glove:FILE"):
        load_text(tmp_path / "all.csv", embedding="word2vec:x.bin")


@pytest.mark.parametrize("name, text, where", [
    ("t.csv", "label,text\npos,good\nneg\n", "t.csv:3: expected a label and a text"),
    ("t.csv", "label,text\n,good\n", "t.csv:2: empty label"),
    ("t.tsv", "index\tsentence\n0\tgood\n", "t.tsv:1: the header"),
    ("t.csv", "", "t.csv: no labelled rows"),
])
def test_malformed_tables_name_file_and_line(tmp_path, name, text, where):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError) as info:
        load_text(tmp_path / name)
    assert where in str(info.value)


def test_test_labels_must_occur_in_training(tmp_path):
    (tmp_path / "train.csv").write_text("a,x\nb,y\n")
    (tmp_path / "test.csv").write_text("c,x\n")
    with pytest.raises(ValueError, match=r"test labels \['c'\]"):
        load_text(tmp_path)


def test_unknown_layout_says_what_is_expected(tmp_path):
    (tmp_path / "notes.md").write_text("hi")
    with pytest.raises(FileNotFoundError, match="train/ and test/ class folders"):
        load_text(tmp_path)


def test_vectors_survive_float_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    vecs = {f"w{i}": rng.standard_normal(5).astype(np.float32).tolist() for i in range(6)}
    write_glove(tmp_path / "g.txt", vecs)
    got, dim = read_glove(tmp_path / "g.txt")
    assert dim == 5 and set(got) == set(vecs)
    for w, v in vecs.items():
        np.testing.assert_array_equal(got[w], np.asarray(v, dtype=np.float32))
