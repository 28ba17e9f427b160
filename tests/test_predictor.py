"""The Predictor (21_predictor) answers what minbert_predict writes, label for label and score for score.

One tiny run on the sample data carries what could make the two differ: two phases (14_phases), per-task prefixes (the
task picks the modules), Quora as a cross-encoder over both sentence orders (pair_swap), a Quora prior correction (the
para_logit_bias buffer), mean pooling and a cosine STS head, and the run's own mixed precision (amp auto: bf16 on a CPU
with native bf16). minbert_predict writes its dev files; the predictor is asked about the same rows in the same order."""
import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from minbert_nb import Predictor
from minbert_nb.data import get_task
from minbert_nb.multitask import ModelConfig, MultitaskBert
from minbert_nb.config import preset_config
from minbert_nb.train import train
from minbert_nb.phases import run_training
from minbert_nb.commands import minbert_predict
from minbert_nb.evaluate import read_predictions, prediction_path, read_raw, raw_path
from minbert_nb.data import load_split
from minbert_nb.predictor import minbert_demo
from datapaths import tiny_backbone_dir

QQ = [("How do I learn Python?", "What is the best way to learn Python?"), ("How do I learn Python?", "Where is Lisbon?")]


@pytest.fixture(scope="module")
def run(module_tmp, small_data):
    out = module_tmp("predictor") / "run"
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), out=str(out), data_dir=str(small_data), steps_per_epoch=2, epochs=1, batch_size=4, train_limit=16,
                        dev_limit=8, eval_batch_size=16, sst_phrases=False, peft="prefix", prefix_len=2, pair_swap=True,
                        phases=[{"name": "quora", "tasks": ["para"], "steps_per_epoch": 1}, {"name": "multitask"}])
    run_training(cfg, progress=False)
    minbert_predict([str(out), "--splits", "dev"])     # the full dev files of the data folder: 60 rows per task
    return out


@pytest.fixture(scope="module")
def p(run): return Predictor.from_run(run)


def test_predictor_gives_minbert_predicts_answers(run, p, small_data):
    assert p.model.para_logit_bias.item() != 0 and p.cfg.pair_swap and p.cfg.peft == "prefix" and p.cfg.phases
    assert p.cfg.eval_batch_size == p.batch_size == 16          # 60 rows: the same four batches as minbert_predict's
    bias, n, same = p.model.para_logit_bias.item(), 0, 0
    for t in ("sst", "para", "sts"):
        dev = load_split(t, "dev", small_data)
        f, raw = read_predictions(prediction_path(run, t, "dev"), t), read_raw(raw_path(run, t, "dev"), t)
        assert f.id.tolist() == dev.id.astype(str).tolist() == raw.id.tolist()
        pairs = list(zip(dev.sentence1, dev.sentence2)) if t != "sst" else None
        if t == "sst":
            got = p.sentiment(dev.sentence1.tolist())
            ok = got.label.to_numpy() == f.pred.astype(int).to_numpy()
            want = torch.softmax(torch.tensor(raw[[f"raw_{j}" for j in range(5)]].to_numpy(np.float32)), -1).numpy()
            np.testing.assert_allclose(got.filter(like="prob_").to_numpy(), want, atol=1e-6)
        elif t == "para":
            got = p.paraphrase(pairs)
            ok = got.label.to_numpy() == f.pred.astype(int).to_numpy()
            np.testing.assert_allclose(got.prob, torch.sigmoid(torch.tensor(raw.raw.to_numpy(np.float32)) + bias).numpy(), atol=1e-6)
            assert (got.label == (got.prob > 0.5)).all()
        else:
            got = p.similarity(pairs)
            ok = np.array([f"{a:.6g}" == f"{b:.6g}" for a, b in zip(got.score, f.pred)])           # as the file writes them
            assert (got.score.to_numpy(np.float32) == raw.raw.to_numpy(np.float32).clip(0, 5)).all()   # and to the last bit
        n, same = n + len(dev), same + int(ok.sum())
    print(f"predictor vs minbert_predict (dev, {p.amp_dtype or 'fp32'}): {same}/{n} rows identical")
    assert n == 180 and same == n


def test_embed(run, p):
    e = p.embed(["A man is playing a guitar.", "Stocks fell.", "Hi"])
    assert e.shape == (3, p.model.bert.config.hidden_size) and e.dtype == torch.float32 and p.embed_task == "sts"
    assert (p.embed(["Stocks fell."], task="sst") - e[1:2]).abs().max() > 1e-3       # per-task prefixes: one vector per task
    p32 = Predictor.from_run(run, amp="off")
    sents = [a for a, _ in QQ] + [b for _, b in QQ]
    e32 = p32.embed(sents)
    torch.testing.assert_close(torch.cat([p32.embed([s]) for s in sents]), e32, atol=1e-5, rtol=0)   # alone = in a padded batch
    floor = p32.model.cfg.cosine_floor                                                              # the cosine STS head
    want = ((F.cosine_similarity(e32[:2], e32[2:]) - floor) * 5 / (1 - floor)).clamp(0, 5)
    np.testing.assert_allclose(p32.similarity(QQ).score, want.numpy(), atol=1e-5)
    torch.testing.assert_close(p32.embed(sents, normalize=True), F.normalize(e32, dim=-1))


def test_bad_input_is_refused_clearly(p, tmp_path):
    with pytest.raises(ValueError, match="the list is empty"): p.sentiment([])
    with pytest.raises(TypeError, match=r"texts\[1\] is nan \(float\)"): p.sentiment(["fine", float("nan")])
    with pytest.raises(TypeError, match="got one string"): p.sentiment("one sentence")
    with pytest.raises(TypeError, match=r"pairs\[0\] is \('a', 'b', 'c'\): expected a pair"): p.paraphrase([("a", "b", "c")])
    with pytest.raises(TypeError, match="got one pair"): p.similarity(("a", "b"))
    with pytest.raises(TypeError, match=r"pairs\[0\]\[1\] is 3"): p.similarity([("a", 3)])
    with pytest.raises(ValueError, match="the list is empty"): p.paraphrase([])
    with pytest.raises(FileNotFoundError, match="no such folder"): Predictor.from_run(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="config.json and best.pt missing"): Predictor.from_run(tmp_path)
    with pytest.raises(ValueError, match="amp='fp16'"): Predictor.from_run(tmp_path, amp="fp16")
    sst_only = Predictor(MultitaskBert(ModelConfig(tasks=("sst",))), p.cfg, p.tok)
    with pytest.raises(ValueError, match="has no paraphrase head: its tasks are sst"): sst_only.paraphrase(QQ)
    with pytest.raises(ValueError, match="has no similarity head"): sst_only.similarity(QQ)
    with pytest.raises(ValueError, match="this model has sst"): sst_only.embed(["x"], task="sts")


def test_progress_bar_and_demo(run, p, capsys):
    p.sentiment(["a", "b"], progress=True)
    assert "sst" in capsys.readouterr().err                                       # tqdm's bar, named by the task
    p.sentiment(["a", "b"]); assert capsys.readouterr().err == ""                 # short inputs: no bar
    out = minbert_demo.main(["--run", str(run), "--device", "cpu", "--a", "How do I learn Python?", "--b", "Where is Lisbon?"])
    text = capsys.readouterr().out
    assert set(out) == {"sentiment", "paraphrase", "similarity"} and get_task("sst").classes[out["sentiment"][0]] in text
    assert "paraphrase: " in text and "similarity: " in text and "of 5" in text
