"""Inputs a careful user gives that the package used to misread or blame on the wrong thing (each test fails on cb91c91):
a dict given to the Predictor (its keys were predicted), nonsense Predictor options (batch_size=0 silently meant the
default), a 1,000-word text for a run whose max_length is longer than the position table, and a data file with a
1 MB field (refused by csv's field size limit as if the quoting were broken)."""
import csv, json, shutil
from pathlib import Path
import pandas as pd
import pytest
from minbert_nb.config import preset_config
from minbert_nb.data import DataError, load_split
from minbert_nb.predictor import Predictor
from minbert_nb.train import train
from datapaths import tiny_backbone_dir

LONG = " ".join(["wonderful"] * 1000)   # a 1,000-word text
QQ = [("How do I learn Python?", "What is the best way to learn Python?")]


@pytest.fixture(scope="module")
def run(module_tmp, small_data):
    "A tiny trained run (a few steps on the 60-row sample)"
    out = module_tmp("inputs") / "run"
    train(preset_config("quick", backbone=tiny_backbone_dir(), out=str(out), data_dir=str(small_data), steps_per_epoch=2, epochs=1, batch_size=4, train_limit=16,
                        dev_limit=8, eval_batch_size=8, sst_phrases=False, predict_test=False), progress=False)
    return out


@pytest.fixture(scope="module")
def p(run): return Predictor.from_run(run, device="cpu")


@pytest.mark.parametrize("call, arg, msg", [
    ("sentiment", {"r1": "A gorgeous movie."}, "sentiment(): expected a list of texts, got a dict"),
    ("embed", {"r1": "A gorgeous movie."}, "embed(): expected a list of texts, got a dict"),
    ("paraphrase", {QQ[0]: 1}, "paraphrase(): expected a list of (sentence1, sentence2) pairs, got a dict"),
    ("similarity", dict(q=QQ[0]), "similarity(): expected a list of (sentence1, sentence2) pairs, got a dict"),
    ("sentiment", pd.DataFrame(dict(sentence=["A gorgeous movie."])), "got a DataFrame"),
    ("sentiment", "one sentence", "got one string"),
    ("sentiment", ["ok", 3], "texts[1] is 3 (int)"),
    ("paraphrase", [("a", "b", "c")], "expected a pair (sentence1, sentence2)"),
])
def test_predictor_refuses_what_is_not_a_list(p, call, arg, msg):
    with pytest.raises((TypeError, ValueError)) as e: getattr(p, call)(arg)
    assert msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kw, msg", [(dict(batch_size=0), "batch_size=0"), (dict(batch_size=-4), "batch_size=-4"),
                                     (dict(batch_size="8"), "batch_size='8'"), (dict(amp="fp16"), "amp='fp16'"),
                                     (dict(device="gpu"), "device='gpu'")])
def test_predictor_refuses_nonsense_options(run, kw, msg):
    with pytest.raises(ValueError) as e: Predictor.from_run(run, **kw)
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


def test_long_text_is_truncated_and_predicted(run, p, tmp_path):
    out = p.sentiment([LONG, "Fine."])
    assert len(out) == 2 and out.label.between(0, 4).all()
    assert len(p.similarity([(LONG, LONG)])) == 1 and p.embed([LONG]).shape[0] == 1
    # a run whose max_length is beyond the position table (512): truncated there, not refused as "truncate when tokenizing"
    odd = shutil.copytree(run, tmp_path / "odd")
    c = json.loads((odd / "config.json").read_text()); c["max_length"] = 100_000; (odd / "config.json").write_text(json.dumps(c))
    q = Predictor.from_run(odd, device="cpu")
    assert q.max_length == 512 and len(q.sentiment([LONG])) == 1 and len(q.paraphrase([(LONG, LONG)])) == 1


def copy_data(small_data, dest) -> Path:
    return Path(shutil.copytree(small_data, dest))


def test_a_1mb_field_is_read(small_data, tmp_path):
    d = copy_data(small_data, tmp_path / "data")
    f = d / "cs224n" / "ids-sst-train.csv"
    lines = f.read_text().splitlines(keepends=True)
    lines.insert(2, "999\tbig-row-id\t" + "x" * 1_000_000 + "\t3\n")
    f.write_text("".join(lines))
    limit = csv.field_size_limit()
    df = load_split("sst", "train", d)
    assert len(df) == len(lines) - 1 and df.set_index("id").loc["big-row-id"].sentence1 == "x" * 1_000_000
    assert csv.field_size_limit() == limit          # the process-wide limit is restored


def test_an_unclosed_quote_is_still_named(small_data, tmp_path):
    d = copy_data(small_data, tmp_path / "data")
    f = d / "cs224n" / "ids-sst-train.csv"
    lines = f.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace("\t", '\t"', 2).replace('\t"', "\t", 1)        # the sentence field opens a quote ...
    lines += [f"{1000 + i}\tpad-{i}\t{'y' * 3000}\t2\n" for i in range(60)]     # ... that swallows > 131,072 characters
    f.write_text("".join(lines))
    with pytest.raises(DataError) as e: load_split("sst", "train", d)
    assert "ids-sst-train.csv:4: a double quote opens a field here that is never closed" in str(e.value)
