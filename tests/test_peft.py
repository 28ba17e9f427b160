"""PEFT modules: LoRA and DoRA equal Hugging Face peft on the same checkpoint and weights; zero-initialised modules leave the
backbone unchanged; merged equals unmerged; parameter counts equal their formulas; prefixes differ per task; pretrain mode
leaves the backbone bit-identical; a PEFT run is rebuilt by load_run"""
import json, re
import pytest, torch
from datapaths import tiny_backbone_dir
from torch import nn
import transformers
from minbert_nb.core import set_seed
from minbert_nb.bert import BertModel
from minbert_nb.pretrained import load_bert, load_tokenizer, tokenize, embedded_backbone_path
from minbert_nb.lora import LoRALinear, inject_lora, set_merged
from minbert_nb.adapters import inject_adapters, inject_pals
from minbert_nb.prefix import inject_prefix
from minbert_nb.peft import is_peft_param
from minbert_nb.multitask import ModelConfig, MultitaskBert
from minbert_nb.config import preset_config, config_from_args
from minbert_nb.train import train, load_run
from minbert_nb.commands import dry_run
from minbert_nb.checkpoint import load_checkpoint

SENTS = ["A man is playing a guitar.", "Someone plays an instrument on a small stage tonight.", "Stocks fell.", "Hi"]


@pytest.fixture(scope="module")
def batch():
    return tokenize(load_tokenizer(), SENTS)


def _real(out, mask): return out[mask.bool()]   # the non-padded positions


@pytest.mark.parametrize("dora", [False, True], ids=["lora", "dora"])
def test_lora_and_dora_equal_hf_peft(batch, dora):
    from peft import LoraConfig, get_peft_model
    set_seed(0)
    hf = transformers.BertModel.from_pretrained(str(embedded_backbone_path()), add_pooling_layer=False).eval()
    hfp = get_peft_model(hf, LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"], lora_dropout=0.0, use_dora=dora)).eval()
    ours = load_bert().eval()
    inject_lora(ours, ["query", "value"], r=8, alpha=16, dora=dora)
    for i in range(ours.config.num_hidden_layers):
        for p in ("query", "value"):
            h, o = getattr(hfp.base_model.model.encoder.layer[i].attention.self, p), getattr(ours.encoder.layer[i].attention.self, p)
            with torch.no_grad():
                for a, b in ((h.lora_A["default"].weight, o.lora_A.weight), (h.lora_B["default"].weight, o.lora_B.weight)):
                    a.normal_(0, 0.05); b.copy_(a)
                if dora:
                    m = h.lora_magnitude_vector["default"].weight
                    m.mul_(torch.rand_like(m) + 0.5); o.lora_magnitude.copy_(m)
    with torch.no_grad():
        a = _real(hfp(**batch).last_hidden_state, batch["attention_mask"])
        b = _real(ours(**batch).last_hidden_state, batch["attention_mask"])
        assert (a - _real(hf.__class__.from_pretrained(str(embedded_backbone_path()), add_pooling_layer=False).eval()(**batch).last_hidden_state,
                          batch["attention_mask"])).abs().max() > 1e-3     # the adapters do change the output
    diff = (a - b).abs().max().item()
    print(f"{'DoRA' if dora else 'LoRA'} vs peft: max abs diff {diff:.2e}")
    assert diff <= 1e-5
    with torch.no_grad(): merged = _real(set_merged(ours)(**batch).last_hidden_state, batch["attention_mask"])
    assert (merged - b).abs().max() <= 1e-5


def test_zero_initialised_modules_leave_the_backbone_unchanged(batch):
    ref = load_bert().eval()
    with torch.no_grad(): y0 = ref(**batch).last_hidden_state
    assert (batch["attention_mask"] == 0).any()   # padded: PAL runs packed too (02_bert), its zero branch added at the real tokens
    for inject in (lambda m: inject_adapters(m, ["sst", "sts"], 64), lambda m: inject_pals(m, ["sst", "sts"], 204)):
        m = load_bert().eval(); inject(m)
        with torch.no_grad(): assert torch.equal(m(**batch, task="sts").last_hidden_state, y0)    # exactly
    m = load_bert().eval(); inject_lora(m, ["query", "key", "value", "attention_output", "intermediate", "output"], r=4)
    with torch.no_grad():   # B = 0: the base output; q, k, v now run as three matmuls instead of one fused one, hence not bitwise
        assert (m(**batch).last_hidden_state - y0).abs().max() <= 1e-5


@pytest.mark.parametrize("peft,n", [("lora", 147_456), ("dora", 152_064), ("adapter", 1_785_600), ("prefix", 138_240)])
def test_peft_parameter_counts_on_minilm(peft, n):
    r = MultitaskBert(ModelConfig(peft=peft, lora_r=16, lora_targets="query,value", adapter_size=64, prefix_len=10)).set_mode("pretrain").param_report()
    assert r["peft"] == n
    assert r["trainable"] == n + r["heads"] + r["layernorm"] and r["backbone_trainable"] == 0
    assert r["layernorm"] == (3 * 13 * 2 * 384 if peft == "adapter" else 0)   # adapters train a copy of the 13 LayerNorms per task


def test_per_task_layernorms_are_the_default_and_shared_ones_an_option():
    "Houlsby: each task trains its own LayerNorms (29,952 parameters on MiniLM with 3 tasks); --adapter_layernorm shared keeps one set"
    cfg = config_from_args(["--peft", "adapter", "--mode", "pretrain"])
    assert cfg.adapter_layernorm == "task"
    r = MultitaskBert(cfg.model_config()).param_report()
    assert (r["layernorm"], r["backbone_trainable"], r["peft"]) == (29_952, 0, 1_785_600)
    r = MultitaskBert(config_from_args(["--peft", "adapter", "--mode", "pretrain", "--adapter_layernorm", "shared"]).model_config()).param_report()
    assert (r["layernorm"], r["backbone_trainable"], r["peft"]) == (0, 13 * 2 * 384, 1_785_600)
    with pytest.raises(SystemExit): config_from_args(["--peft", "adapter", "--adapter_layernorm", "per-task"])


def test_prefix_tasks_attend_differently_and_hidden_init_uses_real_activations(batch):
    m = load_bert().eval()
    pre = inject_prefix(m, ["sst", "sts"], length=10)
    with torch.no_grad():
        a = m(**batch, task="sst", output_attentions=True).attentions
        b = m(**batch, task="sts", output_attentions=True).attentions
    assert all((x - y).abs().max() > 1e-4 for x, y in zip(a, b))
    pre.init_from_hidden(m, batch, "sst")
    m.prefix_provider = None
    with torch.no_grad(): hs = m(**batch, output_hidden_states=True).hidden_states
    lay = m.encoder.layer[3].attention.self
    real = hs[3][batch["attention_mask"].bool()][:10]                 # the first 10 real tokens of the batch, at layer 3's input
    assert torch.allclose(pre.prefix_kv["sst"][3, 0], lay.split_heads(lay.key(real)[None])[0], atol=1e-5)
    assert torch.allclose(pre.prefix_kv["sst"][3, 1], lay.split_heads(lay.value(real)[None])[0], atol=1e-5)


def test_pretrain_keeps_the_backbone_finetune_changes_it(tmp_path, small_data):
    "All four kinds of module at once (LoRA wraps q/v, adapters wrap the output projections, PALs and prefixes sit beside)"
    base = {k: v.clone() for k, v in load_bert(tiny_backbone_dir()).state_dict().items()}   # the tiny random BERT: which weights move is checked
    out = {}
    for mode in ("pretrain", "finetune"):
        cfg = preset_config("quick", out=str(tmp_path/mode), data_dir=str(small_data), steps_per_epoch=3, batch_size=4, train_limit=16, backbone=tiny_backbone_dir(),
                            dev_limit=8, eval_batch_size=8, peft="lora,adapter,pal,prefix", mode=mode, lora_r=2, pal_size=24,
                            prefix_len=2, adapter_size=4, prefix_init="hidden")
        m = train(cfg, progress=False)
        assert m["params"]["peft"] > 0
        sd = load_checkpoint(tmp_path/mode/"last.pt")["model"]
        out[mode] = {k: sd["bert." + _adapter_name(_lora_name(k))] for k in base}   # wrapped layers: NAME -> NAME.base_layer
        if mode == "pretrain":   # with adapters each task's copy of the LayerNorms trains (the backbone's own stay, unused)
            lns = {k: v for k, v in sd.items() if ".layernorm_by_task." in k}
            assert lns and any(not torch.equal(v, base[re.sub(r"\.layernorm_by_task\.\w+", "", k[len("bert."):])]) for k, v in lns.items())
    frozen = list(base)
    assert all(torch.equal(out["pretrain"][k], base[k]) for k in frozen)            # bit-identical, LayerNorms included
    assert any(not torch.equal(out["finetune"][k], base[k]) for k in frozen)
    model, cfg = load_run(tmp_path/"pretrain", "cpu")                                # rebuilt with its modules; weights load by name
    assert cfg.peft == "lora,adapter,pal,prefix" and {n.split("_")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if is_peft_param(n)} >= {"lora", "adapter", "pal", "prefix"}


def _lora_name(k):
    for p in ("query", "value"):
        if f".attention.self.{p}." in k: return k.replace(f".{p}.", f".{p}.base_layer.")
    return k

def _adapter_name(k):
    import re
    return re.sub(r"(attention\.output\.dense|layer\.(\d+)\.output\.dense)\.", lambda m: m.group(0)[:-1] + ".base_layer.", k)


def test_dry_run_offline_bert_base(tmp_path):
    r = dry_run(config_from_args(["--backbone", "bert-base-uncased", "--random_init", "--peft", "adapter", "--adapter_size", "64",
                                  "--mode", "pretrain", "--out", str(tmp_path)]))
    assert json.loads((tmp_path/"params.json").read_text()) == r
    assert r["peft"] == 3 * 12 * 2 * (2 * 768 * 64 + 64 + 768)
    assert set(r) == {"total", "trainable", "backbone_trainable", "peft", "layernorm", "heads"}
    assert r["layernorm"] == 3 * 25 * 2 * 768                      # per-task copies of bert-base's 25 LayerNorms


def test_dry_run_pal_counts_are_unchanged_by_gelu_and_heads(tmp_path):
    "--peft pal: GELU and the head count add no parameters, so the peft count is the formula's (12 heads or the reference's 6)"
    n = 3 * (2 * 384 * 204 + 204 + 384) + 3 * 6 * 3 * (204 * 204 + 204)
    for heads in ([], ["--pal_heads", "12"]):
        r = dry_run(config_from_args(["--dry_run", "--peft", "pal", "--mode", "pretrain", "--out", str(tmp_path)] + heads))
        assert (r["peft"], r["layernorm"]) == (n, 0)


def test_pretrain_with_a_parameter_free_sts_head(tmp_path, small_data):
    "Sentence-BERT in pretrain mode without a module: the cosine STS head has nothing to train, and the run still trains the rest"
    m = train(preset_config("000-t4-sbert-none-pretrain", out=str(tmp_path), data_dir=str(small_data), steps_per_epoch=6, batch_size=4,
                            train_limit=16, dev_limit=8, eval_batch_size=8, sampler="round_robin"), progress=False)
    assert m["params"]["peft"] == 0 and m["params"]["trainable"] == m["params"]["heads"] and "sts_corr" in m


def test_seed000_prefixes_are_layer_inputs_from_the_first_sst_batch(tmp_path, small_data):
    "prefix_kind input, prefix_init hidden-sst: every task's prefixes are the layer inputs at SST's first batch's first real tokens"
    from minbert_nb.train import Run
    from minbert_nb.loaders import make_loader
    cfg = preset_config("quick", out=str(tmp_path/"r"), data_dir=str(small_data), steps_per_epoch=2, batch_size=4, train_limit=16,
                        dev_limit=8, eval_batch_size=8, peft="prefix", mode="pretrain", prefix_len=3, prefix_kind="input",
                        prefix_init="hidden-sst", sst_phrases=False)
    run = Run(cfg, progress=False).open(); run._data(); run._model()
    pre, bert = run.model.bert.prefix_provider, run.model.bert
    first = next(iter(make_loader(run.data["train"]["sst"], cfg.batch_size)))["a"]
    bert.prefix_provider = None
    with torch.no_grad(): hs = bert.eval()(**first, output_hidden_states=True).hidden_states
    bert.prefix_provider = pre
    real = hs[4][first["attention_mask"].bool()][:3]
    for t in ("sst", "para", "sts"): assert torch.allclose(pre.prefix_input[t][4], real, atol=1e-5), t
    assert run.counts["peft"] == 3 * 6 * 3 * 384                                    # one hidden vector per task, layer and position
    bad = preset_config("quick", out=str(tmp_path/"q"), data_dir=str(small_data), tasks=("para",), peft="prefix", prefix_init="hidden-sst",
                        steps_per_epoch=1, batch_size=4, train_limit=8, dev_limit=8)
    r = Run(bad, progress=False).open(); r._data()
    with pytest.raises(ValueError, match="does not train sst"): r._model()
