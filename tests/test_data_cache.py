"The data cache: the key covers every file a build opens, a cached run equals an uncached one, a cached read is fast"
import dataclasses, json, os, shutil, sys, time, warnings
from pathlib import Path
import pytest
from datapaths import tiny_backbone_dir, SAMPLE
from minbert_nb.data_cache import DataCache
from minbert_nb.pretrained import load_tokenizer
from minbert_nb.config import TrainConfig, preset_config
from minbert_nb.run_data import build_data, data_inputs
from minbert_nb.train import train

@pytest.fixture(scope="module")
def tok(): return load_tokenizer()

@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"; monkeypatch.setenv("MINBERT_CACHE", str(d)); return d

_OPENED, _WATCH = [], [False]
def _audit(event, args):
    if _WATCH[0] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)): _OPENED.append(os.fsdecode(args[0]))
sys.addaudithook(_audit)   # stays for the session; records only while _WATCH[0] is set

def test_key_names_every_file_a_build_reads(tmp_path, tok):
    "Every data file an uncached build opens (with every option that reads one) is in `data_inputs`, with its SHA-256"
    data = tmp_path / "data"; shutil.copytree(SAMPLE, data)
    extra = tmp_path / "more-sts.tsv"; extra.write_text("a\tb\tscore\nA man sings .\tA man is singing .\t4.5\n")
    cfg = TrainConfig(data_dir=str(data), cache=False, sick=True, quora_extra_2=True, quora_implied="both", sst_phrases=True,
                      contrastive_weight=1.0, pair_modes={"para": "cross"}, pair_swap=True,
                      extra_train=[dict(task="sts", path=str(extra), columns=dict(sentence1="a", sentence2="b", label="score"))])
    _OPENED.clear(); _WATCH[0] = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore"); build_data(cfg, tok, ("train", "dev", "test"))
    finally: _WATCH[0] = False
    read = {str(Path(p).resolve()) for p in _OPENED if Path(p).resolve().is_relative_to(tmp_path) and Path(p).is_file()}
    keyed = data_inputs(cfg, tok, ("train", "dev", "test"))["files"]
    assert read and read <= set(keyed), sorted(read - set(keyed))
    assert str(extra.resolve()) in read and all(len(v) == 64 for k, v in keyed.items() if k in read)

def test_a_changed_file_is_read_again(tmp_path, tok, cache_dir):
    data = tmp_path / "data"; shutil.copytree(SAMPLE, data)
    cfg = TrainConfig(tasks=("sst",), data_dir=str(data), sst_phrases=False)
    a, b = build_data(cfg, tok, ("dev",)), build_data(cfg, tok, ("dev",))
    assert (a["cache"]["status"], b["cache"]["status"]) == ("built", "hit")
    f = data / "cs224n" / "ids-sst-dev.csv"
    lines = f.read_text().splitlines(keepends=True); f.write_text("".join(lines[:-1]))   # one row fewer
    c = build_data(cfg, tok, ("dev",))
    assert c["cache"]["status"] == "built" and len(c["dev"]["sst"]) == len(a["dev"]["sst"]) - 1
    assert len(list(cache_dir.glob("data-*"))) == 2

def test_damaged_entry_is_rebuilt_not_used(tok, cache_dir):
    cfg = TrainConfig(tasks=("sts",), data_dir=str(SAMPLE), dev_limit=20)
    good = build_data(cfg, tok, ("dev",))
    p = Path(good["cache"]["path"]); raw = bytearray(p.read_bytes())
    raw[-50] ^= 0x10; p.write_bytes(bytes(raw))                               # one bit in the last array
    with pytest.warns(UserWarning, match="damaged data cache entry: its SHA-256 does not match"):
        again = build_data(cfg, tok, ("dev",))
    assert again["cache"]["status"] == "built" and again["dev"]["sts"].a == good["dev"]["sts"].a
    p.write_bytes(p.read_bytes()[:1000])                                      # cut short
    with pytest.warns(UserWarning, match="truncated"): assert build_data(cfg, tok, ("dev",))["cache"]["status"] == "built"
    assert build_data(cfg, tok, ("dev",))["cache"]["status"] == "hit"

def test_warnings_of_reading_are_said_again_from_the_cache(tmp_path, tok, cache_dir):
    "A row skipped with --skip_bad_rows warns on the cached run too, and is counted the same"
    data = tmp_path / "data"; shutil.copytree(SAMPLE, data)
    f = data / "cs224n" / "ids-sst-dev.csv"; f.write_text(f.read_text() + "999\tbroken-row\t\t3\n")
    cfg = TrainConfig(tasks=("sst",), data_dir=str(data), skip_bad_rows=True)
    for status in ("built", "hit"):
        with pytest.warns(UserWarning, match="skipped 1 bad row"): d = build_data(cfg, tok, ("dev",))
        assert d["cache"]["status"] == status and d["files"]["sst_dev_skipped_rows"] == 1

def test_cached_run_equals_uncached_run(tmp_path, small_data, cache_dir, tok):
    "The same tiny run with the cache off and from the cache: the scores agree to the last digit"
    kw = dict(data_dir=str(small_data), steps_per_epoch=2, batch_size=4, train_limit=16, dev_limit=16, eval_batch_size=16, save_checkpoint=False,
              backbone=tiny_backbone_dir())                                   # the tiny random BERT, MiniLM's tokenizer: the data is what is checked
    build_data(preset_config("quick", **kw), tok)                             # fills the cache (what a first run does)
    runs = {name: train(preset_config("quick", out=str(tmp_path / name), cache=name == "hit", **kw), progress=False) for name in ("off", "hit")}
    for name, m in runs.items():
        assert m["data_cache"] == name and m["data_time_s"] > 0
        for k in ("sst_acc", "para_acc", "sts_corr", "overall", "train_padding_fraction"): assert m[k] == runs["off"][k], (name, k)
    assert runs["hit"]["data_cache_path"].startswith(str(cache_dir))
    import pandas as pd
    h = [pd.read_csv(tmp_path / n / "history.csv") for n in ("off", "hit")]
    assert "data_time_s" in h[1] and h[0].train_loss.tolist() == h[1].train_loss.tolist()

def test_cached_read_takes_under_a_quarter(tok, cache_dir):
    """The `quick` preset's data on the committed sample: the cached read costs well under building it. The issue's figure
    (at most 25% on the full data) is measured by whole `quick` runs (data_time_s in metrics.json), not here: a shared CI
    machine's timings are noisy, so this guard allows 50%"""
    cfg = preset_config("quick", data_dir=str(SAMPLE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter(); d = build_data(cfg, tok); first = time.perf_counter() - t0
        hits = []
        for _ in range(2):
            t0 = time.perf_counter(); h = build_data(cfg, tok); hits.append(time.perf_counter() - t0)
    assert (d["cache"]["status"], h["cache"]["status"]) == ("built", "hit")
    print(f"quick data on the sample: built in {first:.2f} s, cached {min(hits):.2f} s ({min(hits) / first:.0%})")
    assert min(hits) <= 0.5 * first
