"""minBERT's MPNet against transformers.MPNetModel loaded from the same checkpoint folder: a small random MPNet here, and
all-mpnet-base-v2 itself when it is installed (`minbert_data --backbone all-mpnet-base-v2`); PEFT methods and a short
multitask run on a tiny MPNet; a LoRA run on it exported (hf, sentence-transformers, peft) and loaded back by each library"""
import copy, json, math, warnings
from pathlib import Path
import pytest, torch
import transformers
from minbert_nb.core import count_params, set_seed
from minbert_nb.bert import MPNetConfig, MPNetModel, relative_position_bucket, set_attn_implementation, tiny_mpnet_config
from minbert_nb.pretrained import (CheckpointError, backbones_dir, embedded_backbone_path, load_bert, load_tokenizer, mean_pool,
                                   normalize_hf_keys, quiet_transformers, tiny_backbone, tokenize, write_mpnet_tokenizer)
from minbert_nb.peft import PeftConfig, inject_peft, set_trainable, is_peft_param

SMALL = dict(vocab_size=30527, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             max_position_embeddings=258, layer_norm_eps=1e-5, relative_attention_num_buckets=32)
SENTS = ["Hello world.", "The quick brown fox jumps over the lazy dog, twice, in the rain.",
         "A longer sentence with several words to make the padding matter a lot more than before, really.", "Short."]
PAIRS = (["How old are you?", "A man is playing a guitar.", "Stocks fell."],
         ["What is your age?", "Someone plays an instrument on a stage in front of many people.", "The market dropped sharply today."])
TOL = {torch.float32: 1e-5, torch.bfloat16: 0.1}   # largest |difference| of hidden states (bf16: 8 bits of mantissa, 2 layers)


def _randomize(model, seed=0):
    "Every parameter drawn at random, LayerNorms, biases and the position bias included, so that no weight hides behind its init"
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            std = 0.5 if "relative_attention_bias" in n else 0.05 if p.dim() > 1 else 0.2
            p.copy_((1.0 if n.endswith("LayerNorm.weight") else 0.0) + std * torch.randn(p.shape, generator=g))
        for e in (model.embeddings.word_embeddings, model.embeddings.position_embeddings): e.weight[1].zero_()   # <pad>'s rows
    return model


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    "A checkpoint folder written by transformers: a random 2-layer MPNet (width 64) and all-mpnet-base-v2's tokenizer"
    d = tmp_path_factory.mktemp("small-mpnet")
    torch.manual_seed(0)
    with quiet_transformers(): _randomize(transformers.MPNetModel(transformers.MPNetConfig(**SMALL))).save_pretrained(str(d))
    write_mpnet_tokenizer(d, embedded_backbone_path()/"vocab.txt")
    return d

def _pair(ckpt, **over):
    "(minBERT, transformers) models of `ckpt`, in eval mode; `over` changes config fields of both (e.g. dropout)"
    ours = load_bert(ckpt, **over).eval()
    with quiet_transformers(): ref = transformers.MPNetModel.from_pretrained(str(ckpt), **over).eval()
    return ours, ref

@pytest.fixture(scope="module")
def models(ckpt): return _pair(ckpt)

def _batch(kind, tok):
    if kind == "single": return tokenize(tok, SENTS)
    if kind == "pair": return tokenize(tok, *PAIRS)
    g = torch.Generator().manual_seed(1)                   # random ids, rows of different lengths; "long" reaches the far buckets
    lens = [20, 7, 13, 3] if kind == "random" else [200, 150]
    ids = torch.full((len(lens), max(lens)), 1); am = torch.zeros_like(ids)
    for i, n in enumerate(lens): ids[i, :n] = torch.randint(3, SMALL["vocab_size"], (n,), generator=g); am[i, :n] = 1
    return dict(input_ids=ids, attention_mask=am, token_type_ids=torch.zeros_like(ids))

def _diffs(a, b, enc):
    real = enc["attention_mask"].bool()
    return ((a.last_hidden_state.float() - b.last_hidden_state.float())[real].abs().max().item(),
            (a.pooler_output.float() - b.pooler_output.float()).abs().max().item())

def _names(ref) -> dict:
    "minBERT name -> transformers name, for every parameter of `ref`"
    return {next(iter(normalize_hf_keys({k: 0}))): k for k, _ in ref.named_parameters()}


def test_names_and_parameter_counts(ckpt, models):
    ours, ref = models
    assert ours.load_report.unexpected == [] and ours.load_report.missing_optional == []
    assert set(ours.state_dict()) == set(normalize_hf_keys(ref.state_dict()))
    assert type(ours) is MPNetModel and ours.config.layer_norm_eps == 1e-5 and ours.config.pad_token_id == 1
    with torch.device("meta"):     # all-mpnet-base-v2's shape, without allocating it
        with quiet_transformers(): theirs = transformers.MPNetModel(transformers.MPNetConfig(vocab_size=30527, max_position_embeddings=514))
        assert count_params(MPNetModel(MPNetConfig())) == count_params(theirs) == 109_486_464

def test_buckets_match_transformers():
    rel = torch.arange(-700, 701)
    theirs = transformers.models.mpnet.modeling_mpnet.MPNetEncoder.relative_position_bucket(rel, num_buckets=32, max_distance=128)
    assert torch.equal(relative_position_bucket(rel), theirs)
    ours, ref = MPNetModel(tiny_mpnet_config()), None
    with quiet_transformers(): ref = transformers.MPNetModel(transformers.MPNetConfig(**{k: v for k, v in tiny_mpnet_config().to_dict().items()
                                                                                         if k not in ("attn_implementation", "relative_attention_max_distance")}))
    ref.encoder.relative_attention_bias.load_state_dict(ours.encoder.relative_attention_bias.state_dict())
    x = torch.zeros(2, 40, 32)
    assert torch.equal(ours.encoder.position_bias(40).expand(2, -1, -1, -1), ref.encoder.compute_position_bias(x))

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("kind", ["single", "pair", "random", "long"])
def test_eval_parity(ckpt, models, kind, impl, dtype):
    ours, ref = (copy.deepcopy(m).to(dtype) for m in models)
    set_attn_implementation(ours, impl)
    enc = _batch(kind, load_tokenizer(ckpt))
    assert enc["attention_mask"].min() == 0, "the batch must contain padding"
    with torch.no_grad(): d_h, d_p = _diffs(ours(**enc), ref(**enc), enc)
    print(f"[eval {kind} {impl} {dtype}] max |diff| last_hidden_state={d_h:.2e} pooler_output={d_p:.2e}")
    assert d_h <= TOL[dtype] and d_p <= TOL[dtype]

def test_bf16_autocast_parity(ckpt, models):
    ours, ref = models
    enc = _batch("pair", load_tokenizer(ckpt))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16): d_h, d_p = _diffs(ours(**enc), ref(**enc), enc)
    print(f"[eval autocast bf16] max |diff| last_hidden_state={d_h:.2e} pooler_output={d_p:.2e}")
    assert d_h <= TOL[torch.bfloat16] and d_p <= TOL[torch.bfloat16]

def test_pair_format_and_token_types(ckpt, models):
    ours, ref = models
    tok = load_tokenizer(ckpt)
    assert type(tok).__name__.startswith("MPNetTokenizer")
    enc = tokenize(tok, *PAIRS)
    toks = tok.convert_ids_to_tokens(enc["input_ids"][0])
    assert toks[:7] == ["<s>", "how", "old", "are", "you", "?", "</s>"] and toks[7] == "</s>" and toks[12:14] == ["?", "</s>"]
    assert enc["token_type_ids"].max() == 0 and tok.pad_token_id == ours.config.pad_token_id == 1
    with torch.no_grad():                                 # token types are ignored: there is no table for them to index
        assert torch.equal(ours(**enc).last_hidden_state, ours(**{**enc, "token_type_ids": torch.ones_like(enc["input_ids"])}).last_hidden_state)

def test_train_mode_dropout_matches_with_the_same_seed(ckpt):
    "With dropout on, the hand-written padded path draws the same masks in the same order as transformers"
    ours, ref = _pair(ckpt)
    ours.unpad = False; set_attn_implementation(ours, "eager"); ours.train(); ref.train()
    enc = _batch("random", None)
    set_seed(3); a = ours(**enc)
    set_seed(3); b = ref(**enc)
    d_h, d_p = _diffs(a, b, enc)
    print(f"[train, dropout 0.1, same seed] max |diff| last_hidden_state={d_h:.2e} pooler_output={d_p:.2e}")
    assert d_h <= 1e-5 and d_p <= 1e-5
    set_seed(4); c = ours(**enc)
    assert _diffs(a, c, enc)[0] > 1e-2                     # and dropout does act

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_train_mode_gradients_match(ckpt, unpad, dtype):
    ours, ref = _pair(ckpt, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ours.unpad = unpad; ours.train(); ref.train()
    enc = _batch("pair", load_tokenizer(ckpt))
    w = torch.randn(*enc["input_ids"].shape, SMALL["hidden_size"], generator=torch.Generator().manual_seed(2))
    real = enc["attention_mask"].bool()
    outs = []
    for m in (ours, ref):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            o = m(**enc)
            loss = (o.last_hidden_state.float() * w)[real].sum() + o.pooler_output.float().pow(2).sum()
        loss.backward(); outs.append(o)
    d_h, _ = _diffs(*outs, enc)
    names, worst = _names(ref), 0.0
    theirs = dict(ref.named_parameters())
    for n, p in ours.named_parameters():
        g, h = p.grad, theirs[names[n]].grad
        if n.endswith("attention.self.key.bias"):         # zero in exact arithmetic: q.b is the same for every key of a row, and
            assert g.abs().max() < 1e-3 and h.abs().max() < 1e-3; continue   # softmax ignores it; both sides hold rounding noise
        rel = ((g - h).norm() / h.norm().clamp(min=1e-12)).item()
        worst = max(worst, rel)
        if dtype == torch.float32: torch.testing.assert_close(g, h, atol=1e-5 * h.abs().max().item() + 1e-7, rtol=1e-4, msg=n)
        else: assert rel < 0.05, (n, rel)                  # bf16 autocast: the gradients agree to a few percent
    print(f"[train {'packed' if unpad else 'padded'} {dtype}] max |diff| hidden={d_h:.2e}, largest relative gradient difference={worst:.2e}")
    assert d_h <= TOL[dtype]
    assert ours.encoder.relative_attention_bias.weight.grad.abs().sum() > 0

def test_not_installed_names_the_command(monkeypatch, tmp_path):
    monkeypatch.setenv("MINBERT_BACKBONES", str(tmp_path))
    for name in ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"):
        with pytest.raises(CheckpointError, match="minbert_data --backbone all-mpnet-base-v2"): load_bert(name)
    with pytest.raises(CheckpointError, match="minbert_data --backbone all-mpnet-base-v2"): load_tokenizer("all-mpnet-base-v2")


# ---- the tiny MPNet in the rest of the library: PEFT methods, SMART, PCGrad, a multitask run, the Predictor

@pytest.fixture(scope="module")
def tiny_mpnet_dir(tmp_path_factory):
    return str(tiny_backbone(tmp_path_factory.mktemp("tiny") / "tiny-mpnet", tiny_mpnet_config(vocab_size=30527, max_position_embeddings=514)))

@pytest.mark.parametrize("method", ["lora", "dora", "adapter", "pal", "prefix"])
def test_each_peft_method_injects_and_trains_a_step(tiny_mpnet_dir, method):
    set_seed(0)
    bert = load_bert(tiny_mpnet_dir).eval()
    enc = tokenize(load_tokenizer(tiny_mpnet_dir), *PAIRS)
    with torch.no_grad(): before = bert(**enc).last_hidden_state
    cfg = PeftConfig(peft=method, lora_r=2, adapter_size=4, pal_size=8, pal_heads=2, prefix_len=2)
    done = inject_peft(bert, cfg, ("sst", "sts"))
    assert done, method
    if method != "prefix":                                # LoRA, DoRA, adapters and PALs start as the identity
        with torch.no_grad(): torch.testing.assert_close(bert(**enc, task="sts").last_hidden_state, before, atol=1e-5, rtol=0)
    set_trainable(bert, "pretrain", cfg.methods)
    trainable = {n: p.detach().clone() for n, p in bert.named_parameters() if p.requires_grad}
    assert trainable and all(is_peft_param(n) or "layernorm_by_task" in n or ".LayerNorm." in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in bert.named_parameters() if not p.requires_grad}
    opt = torch.optim.AdamW([p for p in bert.parameters() if p.requires_grad], lr=1e-2)
    bert.train()
    mean_pool(bert(**enc, task="sts").last_hidden_state, enc["attention_mask"]).pow(2).sum().backward(); opt.step()
    assert any(not torch.equal(p, trainable[n]) for n, p in bert.named_parameters() if n in trainable and is_peft_param(n))
    assert all(torch.equal(p, frozen[n]) for n, p in bert.named_parameters() if n in frozen)
    assert bert.encoder.relative_attention_bias.weight.requires_grad is False

def test_multitask_run_with_smart_pcgrad_and_cross_pairs(tmp_path, small_data, tiny_mpnet_dir):
    from minbert_nb.config import preset_config
    from minbert_nb.train import train, load_run
    from minbert_nb.predictor import Predictor
    cfg = preset_config("quick", backbone=tiny_mpnet_dir, out=str(tmp_path / "run"), data_dir=str(small_data), steps_per_epoch=2, epochs=1,
                        batch_size=4, train_limit=16, dev_limit=8, eval_batch_size=8, smart_weight=1.0, pcgrad=True, sampler="simultaneous",
                        pair_modes={"para": "cross", "sts": "cross"})
    m = train(cfg, progress=False)
    assert all(math.isfinite(m[k]) for k in ("sst_acc", "para_acc", "sts_corr", "overall"))
    model, rcfg = load_run(tmp_path / "run", "cpu")
    assert type(model.bert) is MPNetModel
    p = Predictor(model, rcfg)
    assert type(p.tok).__name__.startswith("MPNetTokenizer")
    sim = p.similarity([("A man is playing a guitar.", "Someone plays an instrument.")])
    assert len(sim) == 1 and 0 <= sim.score[0] <= 5
    assert len(p.sentiment(["A great film."])) == 1


def test_phases_carry_an_mpnet_between_phases(tmp_path, small_data, tiny_mpnet_dir):
    """Training phases on MPNet: a contrastive (MNRL) phase, then a phase at learning rate 0 that must keep the first
    phase's best weights exactly, the relative position bias and the positions' padding offset included"""
    from minbert_nb.phases import run_training
    from minbert_nb.config import config_from_args
    from minbert_nb.checkpoint import load_checkpoint
    ph = ('[{"name": "mnrl", "contrastive_only": true, "contrastive_weight": 1.0, "contrastive_batch": 8, "epochs": 1}, '
          '{"name": "still", "lr_backbone": 0, "lr_heads": 0, "epochs": 1}]')
    m = run_training(config_from_args(["--preset", "quick", "--backbone", tiny_mpnet_dir, "--out", str(tmp_path / "run"),
                                       "--data_dir", str(small_data), "--steps_per_epoch", "3", "--batch_size", "4",
                                       "--train_limit", "16", "--dev_limit", "8", "--eval_batch_size", "8", "--predict_test", "false",
                                       "--sst_phrases", "false", "--contrastive_sources", "para,sts", "--phases", ph]), progress=False)
    assert [p["name"] for p in m["phases"]] == ["mnrl", "still"] and math.isfinite(m["overall"])
    a, b = (load_checkpoint(tmp_path / "run" / d / "best.pt")["model"] for d in ("1-mnrl", "2-still"))
    bias = [k for k in a if k.endswith("relative_attention_bias.weight")]
    assert bias and all(torch.equal(a[k], b[k]) for k in a if k != "para_logit_bias")
    start = load_bert(tiny_mpnet_dir).state_dict()             # and the first phase did train the encoder
    assert any(not torch.equal(a["bert." + k], v) for k, v in start.items() if "bert." + k in a)

# ---- the real all-mpnet-base-v2, when installed

REAL = backbones_dir() / "all-mpnet-base-v2"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"all-mpnet-base-v2 is not installed ({REAL}): minbert_data --backbone all-mpnet-base-v2")

@pytest.fixture(scope="module")
def real():
    ours = load_bert("all-mpnet-base-v2").eval()
    with quiet_transformers(): ref = transformers.MPNetModel.from_pretrained(str(REAL)).eval()
    return ours, ref, load_tokenizer("all-mpnet-base-v2")

@needs_real
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_real_weights_parity(real, dtype):
    ours, ref, tok = real
    assert ours.load_report.unexpected == [] and count_params(ours) == count_params(ref) == 109_486_464
    if dtype != torch.float32: ours, ref = copy.deepcopy(ours).to(dtype), copy.deepcopy(ref).to(dtype)
    for enc in (tokenize(tok, SENTS), tokenize(tok, *PAIRS)):
        with torch.no_grad(): d_h, d_p = _diffs(ours(**enc), ref(**enc), enc)
        print(f"[all-mpnet-base-v2 {dtype}] max |diff| last_hidden_state={d_h:.2e} pooler_output={d_p:.2e}")
        assert d_h <= (1e-5 if dtype == torch.float32 else 0.05) and d_p <= (1e-5 if dtype == torch.float32 else 0.01)

@needs_real
def test_real_sentence_embeddings_match_sentence_transformers(real):
    from sentence_transformers import SentenceTransformer
    ours, _, tok = real
    with quiet_transformers(): st = SentenceTransformer(str(REAL), device="cpu")
    s = ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell sharply today."]
    enc = tokenize(tok, s)
    with torch.no_grad(): e = torch.nn.functional.normalize(mean_pool(ours(**enc).last_hidden_state, enc["attention_mask"]), dim=-1)
    ref = torch.as_tensor(st.encode(s, convert_to_tensor=True)).float()
    assert (e - ref).abs().max() < 1e-5
    sim = e @ e.T
    assert sim[0, 1] > 0.5 > sim[0, 2]


# ---- an MPNet run exported (22_export): transformers, sentence-transformers and peft load it back and compute what minbert_nb computes

@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, small_data, tiny_mpnet_dir):
    "A short LoRA run (backbone frozen) on the tiny MPNet, its adapters trained: the merge and the adapter are not the identity"
    from minbert_nb.config import preset_config
    from minbert_nb.train import train
    out = tmp_path_factory.mktemp("mpnet-lora") / "run"
    train(preset_config("quick", backbone=tiny_mpnet_dir, out=str(out), data_dir=str(small_data), steps_per_epoch=2, epochs=1, batch_size=4,
                        train_limit=16, dev_limit=8, eval_batch_size=16, sst_phrases=False, predict_test=False, peft="lora", mode="pretrain",
                        lora_r=4, lora_targets="query,value,attention_output,output", lr_adapters=1e-2, amp="off"), progress=False)
    return out

@pytest.fixture(scope="module")
def lora_pred(lora_run):
    from minbert_nb.predictor import Predictor
    return Predictor.from_run(lora_run, device="cpu", amp="off")

def _export_diffs(theirs, ours, tok):
    "Largest |difference| of hidden states (real tokens) and pooler outputs, on single sentences and on pairs"
    diffs = [_diffs(theirs(**enc), ours(**enc), enc) for enc in (tokenize(tok, SENTS), tokenize(tok, *PAIRS))]
    return max(d for d, _ in diffs), max(p for _, p in diffs)

def test_mpnet_run_exports_as_a_transformers_mpnet(lora_run, lora_pred, tmp_path):
    from minbert_nb.export import export_run
    res = export_run(lora_run, tmp_path / "hf", "hf")                   # checked by loading it back (verify_export)
    assert res["checked"]["max_abs_diff"] <= 1e-5 and res["checked"]["pooler_max_abs_diff"] <= 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                  # any warning while loading fails the test
        with quiet_transformers(): hf, info = transformers.AutoModel.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert type(hf) is transformers.MPNetModel and not any(info.values()), info
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "mpnet"
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(tok).__name__.startswith("MPNetTokenizer")
    with torch.no_grad(): d_h, d_p = _export_diffs(hf.eval(), lora_pred.model.bert.eval(), tok)
    print(f"[hf export of an MPNet LoRA run] max |diff| last_hidden_state={d_h:.2e} pooler_output={d_p:.2e}")
    assert d_h <= 1e-5 and d_p <= 1e-5
    from safetensors.torch import load_file                             # LoRA merged: the exported query is not the backbone's
    base = load_file(str(Path(lora_pred.cfg.backbone) / "model.safetensors"))["encoder.layer.0.attention.attn.q.weight"]
    assert (hf.encoder.layer[0].attention.attn.q.weight - base).abs().max() > 1e-4
    assert type(load_bert(tmp_path / "hf")) is MPNetModel               # and a minbert_nb backbone: --backbone OUT

def test_mpnet_run_exports_for_sentence_transformers(lora_run, lora_pred, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer
    from minbert_nb.export import minbert_export
    minbert_export([str(lora_run), str(tmp_path / "st"), "--format", "st"])
    assert "smallest cosine with Predictor.embed" in capsys.readouterr().out
    with quiet_transformers(): st = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert type(st[0].auto_model) is transformers.MPNetModel and [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Normalize"]
    e, r = torch.as_tensor(st.encode(SENTS, convert_to_tensor=True)).float(), lora_pred.embed(SENTS, normalize=True)
    print(f"[sentence-transformers export of an MPNet LoRA run] max |diff| {(e - r).abs().max().item():.2e}")
    assert (e - r).abs().max() <= 1e-5

def test_mpnet_run_exports_as_a_peft_adapter_on_transformers_mpnet(lora_run, lora_pred, tmp_path):
    from peft import PeftModel
    from minbert_nb.export import export_run
    export_run(lora_run, tmp_path / "peft", "peft")
    cfg = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    L = lora_pred.model.bert.config.num_hidden_layers
    assert set(cfg["target_modules"]) == {f"encoder.layer.{i}.{n}" for i in range(L)
                                          for n in ("attention.attn.q", "attention.attn.v", "attention.attn.o", "output.dense")}
    assert cfg["base_model_name_or_path"] == str(lora_pred.cfg.backbone)
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        pm = PeftModel.from_pretrained(transformers.MPNetModel.from_pretrained(lora_pred.cfg.backbone), str(tmp_path / "peft")).eval()
    with torch.no_grad(): d_h, d_p = _export_diffs(pm, lora_pred.model.bert.eval(), lora_pred.tok)
    print(f"[peft export of an MPNet LoRA run] max |diff| last_hidden_state={d_h:.2e} pooler_output={d_p:.2e}")
    assert d_h <= 1e-5 and d_p <= 1e-5

def test_mpnet_buckets_transformers_cannot_compute_are_refused(lora_pred, tmp_path):
    from minbert_nb.export import ExportError, export_predictor
    p = copy.copy(lora_pred); p.model = copy.deepcopy(lora_pred.model)
    p.model.bert.config.relative_attention_max_distance = 64           # transformers' MPNetModel always uses 128
    for fmt in ("hf", "st", "peft"):
        with pytest.raises(ExportError, match="relative_attention_max_distance.*nothing was written"): export_predictor(p, tmp_path / fmt, fmt)
        assert not (tmp_path / fmt).exists() and not list(tmp_path.glob(f".{fmt}.partial-*"))
