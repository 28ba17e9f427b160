"""Tests of minbert_nb.trees: the SST training trees against ids-sst-train.csv (the full files and the committed sample),
malformed lines (each a DataError naming file and line), phrases, and one epoch's phrase-level training rows.

Phrase counts use the notebook's definition: a phrase is a non-root node, its text is its leaves joined by single spaces,
and phrases are distinct by text (first occurrence kept). Distinct texts over *all* nodes, roots included, give the data
README's 159,274.
"""
import warnings

import pytest

from minbert_nb.data import DataError, load_split, read_task_file
from minbert_nb.loaders import TaskDataset
from minbert_nb.trees import *

from conftest import SMALL_N
from datapaths import DATA, SAMPLE, needs_full_data

TREES = "extra/sst-trees/train.txt"


def aligned(d, n):
    "Trees of folder `d`, checked against its ids-sst-train.csv: same sentences and labels, in order"
    trees = read_trees(d / TREES)
    csv = read_task_file(d / "cs224n" / "ids-sst-train.csv", "sst")
    assert len(trees) == len(csv) == n
    s = tree_sentences(trees)
    assert list(s.columns) == ["sentence1", "label"] and str(s.label.dtype) == "int64"
    assert s.sentence1.tolist() == csv.sentence1.tolist()
    assert s.label.tolist() == csv.label.tolist()
    check_tree_sentences(trees, csv)
    return trees, csv


# ---------------------------------------------------------------- real files and the sample

@pytest.mark.skipif(not (DATA / TREES).is_file(), reason=f"needs the SST training trees ({TREES}); not found in {DATA}")
@needs_full_data("the SST training trees")
def test_full_trees_match_the_csv():
    trees, csv = aligned(DATA, 8544)
    assert sum(len(t.nodes()) for t in trees) == 318582
    assert max(t.depth() for t in trees) == 30
    assert sum("\xa0" in w for t in trees for w in t.leaves()) == 3           # kept inside the leaf
    ph = tree_phrases(trees)
    assert (len(ph), ph.attrs["nodes"], ph.attrs["label_conflicts"]) == (150743, 310038, 0)
    assert len(set(ph.sentence1) | set(csv.sentence1)) == 159274               # the data README's count
    assert {m: int((ph.n_tokens >= m).sum()) for m in (1, 3, 5, 8)} == {1: 150743, 3: 105910, 5: 70577, 8: 43727}
    assert sorted(ph.sentence1[ph.sentence1.isin(set(csv.sentence1))]) == ["Hey Arnold !", "No. .", "Why ?"]


def test_sample_trees_match_the_csv():
    trees, csv = aligned(SAMPLE, 400)
    ph = tree_phrases(trees)
    assert (len(ph), ph.attrs["label_conflicts"], sum(len(t.nodes()) for t in trees)) == (9085, 0, 14556)
    assert all(t.to_ptb() == s for t, s in zip(trees, (SAMPLE / TREES).read_text(encoding="utf-8").splitlines()))


def test_small_data_has_aligned_trees(small_data):
    trees = load_sst_trees(small_data)
    assert len(trees) == SMALL_N
    check_tree_sentences(trees, load_split("sst", "train", small_data))


def test_missing_trees_file(tmp_path):
    (tmp_path / "cs224n").mkdir()
    with pytest.raises(FileNotFoundError, match="extra/sst-trees/train.txt: not found"): sst_trees_path(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file"): read_trees(tmp_path / "nope.txt")


# ---------------------------------------------------------------- bad input

GOOD = "(3 (2 A) (4 (2 fine) (3 film)))"
BAD = [("(3 (2 a) (2 b)", "unbalanced brackets: 1 '(' not closed"),
       ("(3 (2 a) (3 (2 b)", "unbalanced brackets: 2 '(' not closed"),
       ("(3 (2 a) (2 b)))", "unbalanced brackets: 1 closing bracket(s) more than opening ones"),
       (")(2 a)", "unbalanced brackets: ')' before any '('"),
       ("(3 (5 a) (2 b))", "label '5' is not a whole number from 0 to 4"),
       ("(3 (-1 a) (2 b))", "label '-1' is not a whole number from 0 to 4"),
       ("(2.5 a)", "label '2.5' is not a whole number from 0 to 4"),
       ("(x a)", "label 'x' is not a whole number from 0 to 4"),
       ("((2 a) (2 b))", "a node with no label"),
       ("(3 () (2 b))", "a node with no label"),
       ("(3 (2 ) (2 b))", "empty node (2 ): no word and no sub-trees"),
       ("(3 (2 a) (2 b)) (2 c)", "text after the tree's closing bracket"),
       ("(3 (2 a) (2 b)) .", "text after the tree's closing bracket: '.'"),
       ("3 (2 a)", "text before the tree's opening bracket"),
       ("(2 a b)", "a leaf with more than one word"),
       ("(2 a (2 b))", "has both a word and sub-trees"),
       ("(2 (2 a) b)", "word 'b' next to sub-trees")]


@pytest.mark.parametrize("line,reason", BAD, ids=[b for b, _ in BAD])
def test_bad_line_names_file_and_line(tmp_path, line, reason):
    p = tmp_path / "trees.txt"
    p.write_text(f"{GOOD}\n{GOOD}\n{line}\n{GOOD}\n", encoding="utf-8")
    with pytest.raises(DataError) as e: read_trees(p)
    assert str(e.value).startswith(f"{p}:3: ") and reason in str(e.value), str(e.value)
    assert (e.value.path, e.value.line, e.value.expected is not None, e.value.fix is not None) == (str(p), 3, True, True)


def test_blank_lines_are_skipped_with_a_warning(tmp_path):
    p = tmp_path / "trees.txt"
    p.write_text(f"{GOOD}\n\n   \n{GOOD}\r\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"skipped 2 blank line\(s\) \(lines 2, 3\)"): trees = read_trees(p)
    assert [t.line for t in trees] == [1, 4] and trees[1].text == "A fine film"
    p.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="no trees in the file"): read_trees(p)


def test_not_utf8_names_the_line(tmp_path):
    p = tmp_path / "trees.txt"
    p.write_bytes(GOOD.encode() + b"\n(2 caf\xe9)\n")
    with pytest.raises(DataError, match=r"trees.txt:2: byte 0xE9 is not UTF-8"): read_trees(p)


def test_parse_without_recursion_and_nbsp():
    n = 50_000
    t = parse_tree("".join(f"(2 (1 w{i}) " for i in range(n)) + "(3 end)" + ")" * n)
    assert (t.depth(), len(t.leaves()), len(t.to_ptb()) > 0) == (n + 1, n + 1, True)
    assert parse_tree("(2 8\xa01\\/2)").text == "8\xa01\\/2"
    assert parse_tree(GOOD).to_ptb() == GOOD


def test_check_tree_sentences_names_the_mismatch():
    trees, csv = aligned(SAMPLE, 400)
    bad = csv.copy(); bad.loc[7, "sentence1"] = "something else"
    with pytest.raises(DataError, match=rf"row 7 \(id {csv.id[7]}\) does not match tree line 8: text"): check_tree_sentences(trees, bad)


# ---------------------------------------------------------------- phrases and one epoch of training rows

@pytest.fixture(scope="module")
def sample():
    trees = read_trees(SAMPLE / TREES)
    return trees, read_task_file(SAMPLE / "cs224n" / "ids-sst-train.csv", "sst")


def test_tree_phrases_dedup_and_conflicts():
    trees = [parse_tree("(3 (2 a) (3 (4 good) (2 film)))"), parse_tree("(4 (4 (4 good) (2 film)) (2 !))")]
    with pytest.warns(UserWarning, match="1 repeated phrase"): ph = tree_phrases(trees)
    assert ph.sentence1.tolist() == ["a", "good film", "good", "film", "!"]
    assert ph.tree.tolist() == [0, 0, 0, 0, 1] and ph.attrs["duplicates"] == 3 and ph.attrs["label_conflicts"] == 1
    assert ph.attrs["conflicts"][0] == dict(text="good film", label=3, other=4, tree=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tree_phrases(trees[:1], min_tokens=2).sentence1.tolist() == ["good film"]   # no conflict: no warning
    with pytest.raises(ValueError, match="min_tokens=0"): tree_phrases(trees, 0)


def test_min_tokens_filter(sample):
    trees, csv = sample
    ph1, ph5 = tree_phrases(trees), tree_phrases(trees, min_tokens=5)
    assert ph5.sentence1.tolist() == ph1.sentence1[ph1.n_tokens >= 5].tolist() and (ph5.n_tokens >= 5).all()
    out = phrase_training_set(csv, ph5, 300, epoch=0, seed=0)
    assert (out.sentence1[len(csv):].str.split(" ").str.len() >= 5).all()


def test_phrase_training_set(sample):
    trees, csv = sample
    ph, ns, k = tree_phrases(trees, min_tokens=3), len(csv), 500
    epochs = [phrase_training_set(csv, ph, k, epoch=e, seed=7) for e in range(ph.shape[0] // k)]
    for out in epochs:                                                           # every sentence, every epoch, as read
        assert list(out.columns) == ["id", "sentence1", "label"] and str(out.label.dtype) == "int64"
        assert out.iloc[:ns].reset_index(drop=True).equals(csv[["id", "sentence1", "label"]])
        assert len(out) == ns + k and out.id.is_unique and out.attrs["phrases"] == k and out.attrs["task"] == "sst"
        assert out.id[ns:].str.startswith("phrase-").all()
    ids = [set(o.id[ns:]) for o in epochs]
    assert len(set().union(*ids)) == len(ids) * k                              # epochs of a cycle never repeat a phrase
    assert phrase_training_set(csv, ph, k, epoch=3, seed=7).equals(epochs[3])   # deterministic in (seed, epoch)
    assert set(phrase_training_set(csv, ph, k, epoch=0, seed=8).id[ns:]) != ids[0]
    nxt = set(phrase_training_set(csv, ph, k, epoch=len(ids), seed=7).id[ns:])  # next cycle: a new shuffle
    assert len(nxt) == k and nxt != ids[0]
    for j in (0, 5, 123):                                                        # a phrase's id is its row in phrases_df
        row = phrase_training_set(csv, ph, None).set_index("id").loc[f"phrase-{j}"]
        assert (row.sentence1, row.label) == (ph.sentence1[j], ph.label[j])
    assert len(phrase_training_set(csv, ph, None)) == ns + len(ph) == len(phrase_training_set(csv, ph, 10**9))
    assert len(phrase_training_set(csv, ph, 0)) == ns
    with pytest.raises(ValueError, match="per_epoch=-1"): phrase_training_set(csv, ph, -1)
    with pytest.raises(ValueError, match="no column 'label'"): phrase_training_set(csv[["id", "sentence1"]], ph, 5)


def test_phrases_equal_to_a_sentence_are_dropped(sample):
    trees, csv = sample
    ph = tree_phrases(trees)
    sents = csv.copy(); sents.loc[0, "sentence1"] = ph.sentence1[3]            # make phrase 3 a training sentence
    out = phrase_training_set(sents, ph, None)
    assert "phrase-3" not in set(out.id) and out.attrs["phrases_equal_to_sentences"] == 1
    assert out.attrs["phrases"] == len(ph) - 1 and (out.sentence1 == ph.sentence1[3]).sum() == 1


def test_training_rows_go_into_task_dataset(sample):
    from minbert_nb.pretrained import load_tokenizer
    trees, csv = sample
    out = phrase_training_set(csv, tree_phrases(trees, 5), 40, epoch=1, seed=0)
    ds = TaskDataset(out, "sst", load_tokenizer())
    assert len(ds) == len(csv) + 40 and ds[len(csv)]["id"].startswith("phrase-") and ds[len(csv)]["label"] in range(5)
