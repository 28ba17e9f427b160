"More training data offline (SST phrases, the second Quora file, contrastive positives) and bf16 on CPU, in real runs"
import json, shutil
from pathlib import Path
import pandas as pd
import pytest, torch
from minbert_nb.core import cpu_bf16_supported
from minbert_nb.data import DataError
from minbert_nb.checkpoint import load_checkpoint
from minbert_nb.config import TrainConfig, preset_config
from minbert_nb.train import train, _amp_dtype
from minbert_nb.run_data import build_data
from minbert_nb.pretrained import load_tokenizer
from datapaths import tiny_backbone_dir


def _cfg(out, data, **kw):
    return preset_config("quick", backbone=tiny_backbone_dir(), out=str(out), data_dir=str(data), steps_per_epoch=6, epochs=1, batch_size=4, train_limit=None,
                         dev_limit=16, eval_batch_size=32, predict_test=False, **kw)

MORE = dict(sst_phrases=True, phrase_min_tokens=3, phrases_per_epoch=12, quora_extra_2=True, contrastive_weight=1.0,
            contrastive_batch=4, contrastive_every=2)

def test_run_with_phrases_second_quora_file_and_contrastive_pairs(tmp_path, small_data):
    m = train(_cfg(tmp_path / "run", small_data, **MORE), progress=False)
    f = m["train_files"]
    assert f["sst_train"][-1].endswith("sst-trees/train.txt") and f["sst_train_phrases"] > 12
    assert f["sst_train_rows"] == 60 + f["sst_train_phrases"]                           # every sentence, then the phrases
    assert any(p.endswith("quora-extra-train-2.csv") for p in f["para_train"]) and f["para_train_rows"] == 120
    assert f["contrastive_pairs"] > 60
    it = load_checkpoint(tmp_path / "run" / "last.pt")["iterators"]
    assert it["positions"]["contrastive"] == 3                                          # steps 0, 2, 4 of 6 drew a batch
    hist = pd.read_csv(tmp_path / "run" / "history.csv")
    assert hist.train_loss.notna().all() and m["amp"] == ("bfloat16" if cpu_bf16_supported() else "fp32")

def test_phrases_per_epoch_bounds_the_sst_loader(small_data):
    tok = load_tokenizer()
    d = build_data(TrainConfig(tasks=("sst",), data_dir=str(small_data), sst_phrases=True, phrase_min_tokens=1, phrases_per_epoch=20), tok, ("train",))
    ds = d["train"]["sst"]
    assert ds.pool == (60, 20) and len(ds) > 80
    from minbert_nb.loaders import make_loader
    dl = make_loader(ds, 8, shuffle=True)
    ids = [i for b in dl for i in b["ids"]]
    assert len(dl) == 10 and len(ids) == 80 and sum(i.startswith("phrase-") for i in ids) == 20

def test_trees_that_are_not_the_training_sentences_are_refused(tmp_path, small_data):
    d = tmp_path / "data"; shutil.copytree(small_data, d)
    trees = d / "extra" / "sst-trees" / "train.txt"
    lines = trees.read_text().splitlines(keepends=True)
    trees.write_text("".join(lines[1:] + lines[:1]))                                   # shifted by one line: another sentence
    with pytest.raises(DataError, match="train.txt|ids-sst-train"):
        build_data(TrainConfig(tasks=("sst",), data_dir=str(d), sst_phrases=True), load_tokenizer(), ("train",))

def test_missing_extra_files_say_which_flag_needs_them(tmp_path, small_data):
    d = tmp_path / "data"; shutil.copytree(small_data, d)
    (d / "extra" / "quora-extra-train-2.csv").unlink(); (d / "extra" / "quora-extra-positives.csv").unlink()
    tok = load_tokenizer()
    with pytest.raises(FileNotFoundError, match="quora_extra_2"):
        build_data(TrainConfig(tasks=("para",), data_dir=str(d), quora_extra_2=True), tok, ("train",))
    with pytest.raises(FileNotFoundError, match="contrastive_sources"):
        build_data(TrainConfig(tasks=("para",), data_dir=str(d), contrastive_weight=1.0), tok, ("train",))
    d2 = build_data(TrainConfig(tasks=("para", "sts"), data_dir=str(d), contrastive_weight=1.0, contrastive_sources="para,sts"), tok, ("train",))
    assert len(d2["contrastive"]) > 0

def test_amp_auto_is_bf16_exactly_on_cpus_with_native_bf16():
    cpu = torch.device("cpu")
    assert _amp_dtype(TrainConfig(), cpu) == (torch.bfloat16 if cpu_bf16_supported() else None)
    assert _amp_dtype(TrainConfig(amp="off"), cpu) is None and _amp_dtype(TrainConfig(amp="bf16"), cpu) == torch.bfloat16


def test_a_limited_extra_file_keeps_its_labels_balanced(tmp_path):
    "`limit` draws the same number of each label and keeps the label column (Liu & Shen (000)'s even 15k reviews)"
    from minbert_nb.run_data import read_extra
    f = tmp_path / "reviews.csv"
    pd.DataFrame(dict(text=[f"review number {i}" for i in range(40)], stars=[1] * 30 + [5] * 10)).to_csv(f, index=False)
    spec = dict(task="sst", path=str(f), columns=dict(sentence="text", label="stars"), label_range=[1, 5], limit=8)
    df = read_extra(spec, seed=3)
    assert len(df) == 8 and sorted(df.label.value_counts().tolist()) == [4, 4], df
    assert df.id.tolist() == read_extra(spec, seed=3).id.tolist() != read_extra(spec, seed=4).id.tolist()
