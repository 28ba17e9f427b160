"minBERT against transformers.BertModel loaded from the same checkpoint folder"
import shutil, warnings
import pytest, torch
import transformers
from safetensors.torch import save_file
from minbert_nb.core import BertConfig, count_params, set_seed
from minbert_nb.bert import BertModel, set_attn_implementation
from minbert_nb.pretrained import (CheckpointError, embedded_backbone_path, load_bert, load_tokenizer, read_state_dict,
                                   resolve_checkpoint, tokenize)

SENTS = ["Hello world.", "The quick brown fox jumps over the lazy dog, twice, in the rain.",
         "A longer sentence with several words to make the padding matter a lot more than before, really.", "Short."]

@pytest.fixture(scope="module")
def models():
    path = embedded_backbone_path()
    ours = load_bert(path).eval()
    ref = transformers.BertModel.from_pretrained(str(path), attn_implementation="eager").eval()
    tok = load_tokenizer(path)
    return ours, ref, tok

@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_parity_with_transformers(models, impl):
    ours, ref, tok = models
    set_attn_implementation(ours, impl)
    enc = tokenize(tok, SENTS)
    assert enc["attention_mask"].min() == 0, "the batch must contain padding"
    with torch.no_grad():
        a, b = ours(**enc), ref(**enc)
    real = enc["attention_mask"].bool()
    d_h = (a.last_hidden_state - b.last_hidden_state)[real].abs().max().item()
    d_p = (a.pooler_output - b.pooler_output).abs().max().item()
    print(f"[{impl}] max |diff| last_hidden_state={d_h:.2e} pooler_output={d_p:.2e}")
    assert d_h <= 1e-5 and d_p <= 1e-5

def test_pair_encoding_parity(models):
    ours, ref, tok = models
    set_attn_implementation(ours, "sdpa")
    enc = tokenize(tok, SENTS[:2], SENTS[2:])
    assert enc["token_type_ids"].max() == 1
    with torch.no_grad():
        a, b = ours(**enc), ref(**enc)
    real = enc["attention_mask"].bool()
    assert (a.last_hidden_state - b.last_hidden_state)[real].abs().max() <= 1e-5

def test_attention_probabilities_match(models):
    ours, ref, tok = models
    enc = tokenize(tok, SENTS)
    with torch.no_grad():
        a, b = ours(**enc, output_attentions=True), ref(**enc, output_attentions=True)
    assert len(a.attentions) == len(b.attentions) == 6
    q = enc["attention_mask"].bool()[:, None, :, None]          # real query rows (B, 1, T, 1)
    for x, y in zip(a.attentions, b.attentions): assert ((x - y).abs() * q).max() <= 1e-5

def test_bert_base_param_count_and_forward():
    cfg = BertConfig()  # bert-base-uncased architecture, random init
    set_seed(0)
    ours = BertModel(cfg).eval()
    ref = transformers.BertModel(transformers.BertConfig(**{k: v for k, v in cfg.to_dict().items() if k != "attn_implementation"}))
    assert count_params(ours) == count_params(ref) == 109_482_240
    ids = torch.randint(1, cfg.vocab_size, (2, 16))
    with torch.no_grad(): out = ours(ids, torch.ones_like(ids))
    assert out.last_hidden_state.shape == (2, 16, 768) and torch.isfinite(out.last_hidden_state).all()

def test_state_dict_names_match_transformers():
    cfg = BertConfig(num_hidden_layers=2)
    ref = transformers.BertModel(transformers.BertConfig(**{k: v for k, v in cfg.to_dict().items() if k != "attn_implementation"}))
    ref_keys = {k for k in ref.state_dict() if not k.endswith("position_ids") and not k.endswith("token_type_ids")}
    assert set(BertModel(cfg).state_dict()) == ref_keys

def _copy_ckpt(tmp_path, skip=()):
    src = embedded_backbone_path()
    for f in ["config.json", "model.safetensors", "vocab.txt"]:
        if f not in skip: shutil.copy(src / f, tmp_path / f)
    return tmp_path

@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "vocab.txt"])
def test_missing_file_is_named(tmp_path, missing):
    d = _copy_ckpt(tmp_path, skip=(missing,))
    with pytest.raises(CheckpointError) as e:
        load_bert(d); load_tokenizer(d)
    msg = str(e.value)
    assert (missing in msg) or ("no weights file" in msg and missing == "model.safetensors"), msg

def test_missing_parameter_is_named(tmp_path):
    d = _copy_ckpt(tmp_path, skip=("model.safetensors",))
    sd = read_state_dict(embedded_backbone_path() / "model.safetensors")
    del sd["encoder.layer.3.output.dense.weight"]
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.3\.output\.dense\.weight"): load_bert(d)

def test_mismatched_shape_is_named(tmp_path):
    d = _copy_ckpt(tmp_path, skip=("model.safetensors",))
    sd = read_state_dict(embedded_backbone_path() / "model.safetensors")
    sd["embeddings.word_embeddings.weight"] = torch.zeros(100, 384)
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError) as e: load_bert(d)
    assert "embeddings.word_embeddings.weight" in str(e.value) and "(100, 384)" in str(e.value) and "model.safetensors" in str(e.value)

def test_pytorch_bin_with_bert_prefix(tmp_path):
    "A BertForMaskedLM-style checkpoint: bert. prefix, cls.* head, pytorch_model.bin"
    d = _copy_ckpt(tmp_path, skip=("model.safetensors",))
    sd = {f"bert.{k}": v for k, v in read_state_dict(embedded_backbone_path() / "model.safetensors").items()}
    sd["cls.predictions.bias"] = torch.zeros(30522)
    torch.save(sd, d / "pytorch_model.bin")
    m = load_bert(d)
    assert m.load_report.unexpected == []
    ref = load_bert()
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), ref.state_dict().values()))

def test_unknown_name_offline_fails_fast(monkeypatch):
    import time
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = time.time()
    with pytest.raises(CheckpointError) as e: resolve_checkpoint("bert-base-uncased-does-not-exist")
    assert time.time() - t < 10
    assert "Tried" in str(e.value) and "local folder" in str(e.value)

def test_long_sequences(models):
    ours, _, tok = models
    enc = tokenize(tok, ["word " * 2000])
    assert enc["input_ids"].shape[1] == 512  # truncated by the tokenizer
    with pytest.raises(ValueError, match="longer than the position table"):
        ours(torch.ones(1, 513, dtype=torch.long))

def test_evaluation_after_training_uses_the_new_weights():
    "The q/k/v weight cached for evaluation is dropped after training: PyTorch's fused AdamW moves parameters without bumping their version"
    from minbert_nb.core import tiny_config
    from minbert_nb.optimizer import AdamW
    set_seed(0)
    m = BertModel(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    x = torch.randint(1, 50, (2, 7))
    m.eval()
    with torch.inference_mode(): m(x)                                 # fills the cache
    m.train()
    opt = AdamW(m.parameters(), lr=1e-2, fused=True)
    m(x).last_hidden_state.sum().backward(); opt.step()
    m.eval()
    with torch.inference_mode(): got = m(x).last_hidden_state
    fresh = BertModel(m.config); fresh.load_state_dict(m.state_dict()); fresh.eval()
    with torch.inference_mode(): want = fresh(x).last_hidden_state
    assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()


def test_skipping_padding_changes_nothing_real(models):
    "BertModel.unpad (CPU): the same real-token outputs, pooler and gradients as the padded computation, in fp32 and bf16"
    ours, _, tok = models
    set_attn_implementation(ours, "sdpa")
    enc = tokenize(tok, SENTS)
    real = enc["attention_mask"].bool()
    res = {}
    for unpad in (True, False):
        ours.unpad = unpad
        out = ours(**enc)
        (out.last_hidden_state[real].pow(2).mean() + out.pooler_output.pow(2).mean()).backward()
        res[unpad] = out, {n: p.grad.clone() for n, p in ours.named_parameters() if p.grad is not None}
        ours.zero_grad(set_to_none=True)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16): res[unpad] += (ours(**enc).pooler_output.float(),)
    ours.unpad = True
    (a, ga, ba), (b, gb, bb) = res[True], res[False]
    assert (a.last_hidden_state - b.last_hidden_state)[real].abs().max() <= 1e-5
    assert (a.pooler_output - b.pooler_output).abs().max() <= 1e-5
    assert a.last_hidden_state[~real].abs().max() == 0                      # padding is not computed: zeros
    assert ga.keys() == gb.keys() and len(ga) == len(list(ours.parameters()))
    for n in ga:   # (the key biases' gradients are zero in exact arithmetic: softmax ignores a shift shared by all keys)
        assert (ga[n] - gb[n]).abs().max() <= 1e-3 * gb[n].abs().max() + 1e-7, n
    assert torch.nn.functional.cosine_similarity(ba, bb).min() > 0.999      # bf16: the same up to bf16 rounding
