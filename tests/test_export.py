"""minbert_export (22_export): each format loaded back with its own library, compared with minbert_nb in float32.

Two tiny runs on the sample data: `full` (the quick preset: every weight trains; mean pooling, a cosine STS head, Quora as
a cross-encoder with a prior correction) and `dora` (DoRA on query, value and the FFN output with the backbone frozen;
pooler pooling, bi-encoder heads). hf: transformers' AutoModel loads the folder with no missing or unused weight and gives
minbert_nb's hidden states and pooler output (LoRA/DoRA merged), on single sentences and on pairs (token type 1); the heads
file, read with transformers alone, gives the Predictor's predictions. sentence-transformers: SentenceTransformer(OUT).encode
gives Predictor.embed's vectors (the pooler as Dense + Tanh; Normalize for a cosine STS run, whose STS score is then the
cosine). peft: PeftModel.from_pretrained(BertModel of the backbone, OUT) gives minbert_nb's outputs. Runs with modules a
format cannot carry are refused by the command, with the reason, and nothing is written."""
import functools, json, logging, warnings
from pathlib import Path
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file
from minbert_nb import Predictor
from minbert_nb.export import export_run, export_predictor, minbert_export, ExportError, EXPORT_FORMATS
from minbert_nb.lora import LoRALinear
from minbert_nb.pretrained import tokenize, resolve_checkpoint
from minbert_nb.config import preset_config
from minbert_nb.train import train
from minbert_nb.data import load_split

SINGLE = ["A man is playing a guitar.", "Someone plays an instrument on a small stage tonight.", "Stocks fell.", "Hi"]
PAIRS = [("How do I learn Python?", "What is the best way to learn Python?"), ("A man is playing a guitar.", "Stocks fell."),
         ("Hi", "Hello there, how are you?"), ("Where is Lisbon?", "Where is Lisbon?")]


@pytest.fixture(scope="module")
def runs(module_tmp, small_data):
    base = module_tmp("export")
    common = dict(data_dir=str(small_data), steps_per_epoch=2, epochs=1, batch_size=4, train_limit=16, dev_limit=8, eval_batch_size=16,
                  sst_phrases=False, predict_test=False)
    train(preset_config("quick", out=str(base / "full"), **common), progress=False)
    train(preset_config("quick", out=str(base / "dora"), **common, peft="dora", mode="pretrain", lora_r=4, lora_targets="query,value,output",
                        pooling="pooler", sts_head="features", pair_modes=None, lr_adapters=1e-2, amp="off"), progress=False)
    return base


@pytest.fixture(scope="module")
def preds(runs): return {k: Predictor.from_run(runs / k, device="cpu", amp="off") for k in ("full", "dora")}


@pytest.fixture(scope="module")
def hf_out(runs, module_tmp):
    "Each run exported with --format hf (unchecked: the tests below check)"
    base = module_tmp("hf")
    return {k: export_run(runs / k, base / k, "hf", verify=False) for k in ("full", "dora")}


def _encodings(tok, max_length):
    return [tokenize(tok, SINGLE, max_length=max_length), tokenize(tok, [a for a, _ in PAIRS], [b for _, b in PAIRS], max_length=max_length)]


def _max_diff(theirs, bert, encs):
    "Largest |difference| of the hidden states at real tokens and of the pooler output"
    d, dp = 0.0, 0.0
    with torch.no_grad():
        for enc in encs:
            o, r, m = theirs(**enc), bert(**enc), enc["attention_mask"].bool()
            d = max(d, (o.last_hidden_state[m] - r.last_hidden_state[m]).abs().max().item())
            dp = max(dp, (o.pooler_output - r.pooler_output).abs().max().item())
    return d, dp


def test_dora_run_trained_its_adapters(preds):
    layers = [m for m in preds["dora"].model.modules() if isinstance(m, LoRALinear)]
    assert len(layers) == 18 and all(l.lora_B.weight.abs().max() > 0 for l in layers)   # a non-trivial merge and adapter


@pytest.mark.parametrize("name", ["full", "dora"])
def test_hf_round_trip(preds, hf_out, name, caplog):
    p, res = preds[name], hf_out[name]
    out = Path(res["out"])
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "minbert_heads.json", "minbert_heads.safetensors"} <= set(res["files"])
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")                                        # any warning while loading fails the test
        hf, info = transformers.AutoModel.from_pretrained(str(out), output_loading_info=True)
    assert type(hf).__name__ == "BertModel"
    assert not any(info.values()), info                                       # no missing, unexpected or mismatched weight
    assert not [r for r in caplog.records if r.name.startswith("transformers")], [r.getMessage() for r in caplog.records]
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    d, dp = _max_diff(hf.eval(), p.model.bert.eval(), _encodings(tok, p.cfg.max_length))
    print(f"hf export of {name}: hidden states max abs diff {d:.2e}, pooler {dp:.2e}")
    assert d <= 1e-5 and dp <= 1e-5
    if name == "dora":   # merged: the exported query weight is not the backbone's
        base = load_file(str(resolve_checkpoint(None) / "model.safetensors"))
        assert (hf.encoder.layer[0].attention.self.query.weight - base["encoder.layer.0.attention.self.query.weight"]).abs().max() > 1e-4


def _heads_predict(folder, task, s1, s2=None):
    "A prediction rebuilt from the export with transformers alone: minbert_heads.json says how, minbert_heads.safetensors holds the weights"
    desc, w = json.loads((folder / "minbert_heads.json").read_text()), load_file(str(folder / "minbert_heads.safetensors"))
    tok, enc_model, d = _loaded(folder), _loaded(folder, "model"), desc["tasks"][task]
    T = lambda *x: tok(*x, padding=True, truncation=True, max_length=desc["max_length"], return_tensors="pt")
    def vec(enc):
        o = enc_model(**enc)
        if desc["pooling"] == "cls": return o.last_hidden_state[:, 0]
        if desc["pooling"] == "pooler": return o.pooler_output
        m = enc["attention_mask"].unsqueeze(-1).float(); return (o.last_hidden_state * m).sum(1) / m.sum(1)
    def layers(x):
        for l in d["layers"]:
            x = x @ w[l["weight"]].T + w[l["bias"]]
            if l["activation"] == "relu": x = x.relu()
        return x
    feats = {"concat(u, v)": lambda u, v: torch.cat([u, v], -1), "concat(u, v, |u - v|)": lambda u, v: torch.cat([u, v, (u - v).abs()], -1)}
    with torch.no_grad():
        if d["mode"] == "single": out = layers(vec(T(s1)))
        elif d["mode"] == "cross":
            out = layers(vec(T(s1, s2)))
            if "pair_swap" in d: out = (out + layers(vec(T(s2, s1)))) / 2
        else:
            u, v = vec(T(s1)), vec(T(s2))
            if "cosine" in d: out = (F.cosine_similarity(u, v) - d["cosine_floor"]) * 5 / (1 - d["cosine_floor"])
            else: out = layers(feats[d["features"]](u, v))
    if task == "sst": return out.argmax(-1).numpy(), out.softmax(-1).numpy()
    if task == "para": z = out.squeeze(-1) + d["logit_bias"]; return (z > 0).long().numpy(), torch.sigmoid(z).numpy()
    return out.reshape(-1).clamp(0, 5).numpy(), None


@functools.lru_cache(maxsize=None)
def _loaded(folder, what="tokenizer"):
    return transformers.AutoTokenizer.from_pretrained(str(folder)) if what == "tokenizer" else transformers.AutoModel.from_pretrained(str(folder)).eval()


@pytest.mark.parametrize("name", ["full", "dora"])
def test_heads_file_rebuilds_the_predictions(preds, hf_out, name, small_data):
    p, out = preds[name], Path(hf_out[name]["out"])
    sst = load_split("sst", "dev", small_data).sentence1.tolist()[:8]
    para, sts = [load_split(t, "dev", small_data).head(8) for t in ("para", "sts")]
    lab, prob = _heads_predict(out, "sst", sst); want = p.sentiment(sst)
    assert (lab == want.label.to_numpy()).all(); np.testing.assert_allclose(prob, want.filter(like="prob_").to_numpy(), atol=1e-5)
    lab, prob = _heads_predict(out, "para", para.sentence1.tolist(), para.sentence2.tolist()); want = p.paraphrase(list(zip(para.sentence1, para.sentence2)))
    assert (lab == want.label.to_numpy()).all(); np.testing.assert_allclose(prob, want.prob.to_numpy(), atol=1e-5)
    score, _ = _heads_predict(out, "sts", sts.sentence1.tolist(), sts.sentence2.tolist())
    np.testing.assert_allclose(score, p.similarity(list(zip(sts.sentence1, sts.sentence2))).score.to_numpy(), atol=1e-4)


@pytest.mark.parametrize("name", ["full", "dora"])
def test_sentence_transformers_round_trip(runs, preds, name, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer
    p, out = preds[name], tmp_path / "st"
    minbert_export([str(runs / name), str(out), "--format", "sentence-transformers"])
    assert "smallest cosine with Predictor.embed" in capsys.readouterr().out
    kinds = [m["type"].rsplit(".", 1)[1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == (["Transformer", "Pooling", "Normalize"] if name == "full" else ["Transformer", "Pooling", "Dense"])
    st = SentenceTransformer(str(out), device="cpu")
    e, r = torch.as_tensor(st.encode(SINGLE, convert_to_tensor=True)).float(), p.embed(SINGLE, normalize=name == "full")
    cos = F.cosine_similarity(e, r).min().item()
    print(f"sentence-transformers export of {name}: smallest cosine {cos:.8f}, max abs diff {(e - r).abs().max().item():.2e}")
    assert cos >= 0.99999 and (e - r).abs().max() <= 1e-5
    if name == "full":   # the STS model in a sentence-transformers pipeline: its cosine is the run's STS score
        a, b = st.encode([x for x, _ in PAIRS], convert_to_tensor=True), st.encode([y for _, y in PAIRS], convert_to_tensor=True)
        floor = p.model.cfg.cosine_floor
        got = ((st.similarity_pairwise(a, b).float() - floor) * 5 / (1 - floor)).clamp(0, 5).cpu().numpy()
        np.testing.assert_allclose(got, p.similarity(PAIRS).score.to_numpy(), atol=1e-4)


def test_peft_round_trip(runs, preds, tmp_path, capsys):
    from peft import PeftModel
    p, out = preds["dora"], tmp_path / "peft"
    minbert_export([str(runs / "dora"), str(out), "--format", "peft"])
    assert "largest difference from minbert_nb's hidden states" in capsys.readouterr().out
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["use_dora"] and cfg["r"] == 4 and len(cfg["target_modules"]) == 18
    base = transformers.BertModel.from_pretrained(str(resolve_checkpoint(p.cfg.backbone)))     # the run's backbone, with transformers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        pm = PeftModel.from_pretrained(base, str(out)).eval()
    d, dp = _max_diff(pm, p.model.bert.eval(), _encodings(p.tok, p.cfg.max_length))
    print(f"peft export of dora: hidden states max abs diff {d:.2e}, pooler {dp:.2e}")
    assert d <= 1e-5 and dp <= 1e-5


def test_what_a_format_cannot_carry_is_refused(runs, preds, tmp_path):
    def refused(run, fmt, *needles):
        out = tmp_path / f"out-{run.name}-{fmt}"
        with pytest.raises(SystemExit) as e: minbert_export([str(run), str(out), "--format", fmt])
        msg = str(e.value.code)
        assert msg.startswith("minbert_export: ") and all(n in msg for n in needles), msg
        assert not out.exists() and not list(tmp_path.glob(f".{out.name}*"))        # nothing written, not even a partial folder
    refused(runs / "full", "peft", "no LoRA/DoRA modules", "--format hf")
    for peft, why in {"pal": "PALs add a per-task attention branch", "prefix": "per-task keys and values",
                      "adapter": "Houlsby adapters", "dora,adapter": "Houlsby adapters"}.items():
        run = tmp_path / peft.replace(",", "-"); run.mkdir()      # the run's folder, as if trained with these modules: refused from its config
        cfg = json.loads((runs / "dora" / "config.json").read_text()); cfg["peft"] = peft
        (run / "config.json").write_text(json.dumps(cfg)); (run / "best.pt").symlink_to(runs / "dora" / "best.pt")
        for fmt in EXPORT_FORMATS: refused(run, fmt, f"cannot be exported as {fmt}", why, "No export format carries", "Predictor.from_run")
    changed = Predictor(preds["dora"].model, preds["dora"].cfg, preds["dora"].tok, run=runs / "dora")
    w = changed.model.bert.encoder.layer[2].output.LayerNorm.weight
    with torch.no_grad(): w.add_(0.01)                             # as if the run had trained the backbone too (--mode finetune)
    try:
        with pytest.raises(ExportError, match="1 backbone weight.*differ from the backbone checkpoint.*--format hf"):
            export_predictor(changed, tmp_path / "peft-changed", "peft")
    finally:
        with torch.no_grad(): w.sub_(0.01)
    assert not (tmp_path / "peft-changed").exists()
    with pytest.raises(SystemExit, match="exists and holds files that minbert_export did not write"):
        (tmp_path / "taken").mkdir(); (tmp_path / "taken" / "x").write_text("x")
        minbert_export([str(runs / "full"), str(tmp_path / "taken")])
