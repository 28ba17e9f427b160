"The fused epilogues (02b_fused) against the plain layers: every PEFT model, a training run, a compiled graph (on CPU, aot_eager)"
import json
import pytest, torch
import torch._dynamo as dynamo
from minbert_nb.config import preset_config
from minbert_nb.multitask import MultitaskBert, fake_batch
from minbert_nb.fused import use_fused_epilogues
from minbert_nb.checkpoint import load_checkpoint
from datapaths import tiny_backbone_dir, SAMPLE, run_command

def _model(peft):
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), peft=peft, out="unused").model_config()
    torch.manual_seed(0)
    return MultitaskBert(cfg).train(), cfg

def _loss_and_grads(model, batch, seed=3):
    model.zero_grad(); torch.manual_seed(seed)                  # the same dropout stream in both runs
    out = model(batch); loss = out.pred.float().pow(2).mean() + out.u.float().pow(2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

@pytest.mark.parametrize("peft", ["none", "pal", "prefix", "adapter", "lora", "dora"])
def test_equals_the_plain_layers_in_training(peft):
    "fp32, dropout on: the same loss and gradients; what a PEFT method changed keeps its own path (adapters' per-task LayerNorms)"
    model, cfg = _model(peft)
    batch = fake_batch("sts", B=4, T=12, vocab=100, pair_mode=cfg.mode_of("sts"))
    ref_loss, ref_g = _loss_and_grads(model, batch)
    n = use_fused_epilogues(model, "aot_eager")
    layers = model.bert.config.num_hidden_layers
    if peft == "adapter": assert n == dict(fused=layers, plain=2 * layers), n      # the intermediates; TaskLayerNorm blocks stay plain
    else: assert n == dict(fused=3 * layers, plain=0), n
    loss, g = _loss_and_grads(model, batch)
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=1e-7), (loss, ref_loss)
    assert g.keys() == ref_g.keys() and all(torch.allclose(g[k], ref_g[k], rtol=1e-5, atol=1e-6) for k in g)

@pytest.mark.parametrize("peft", ["none", "lora"])
def test_one_graph_no_breaks(peft):
    model, cfg = _model(peft); model.bert.unpad = False
    use_fused_epilogues(model, "aot_eager")
    dynamo.reset()
    ex = dynamo.explain(model)(fake_batch("sts", B=4, T=12, vocab=100, pair_mode=cfg.mode_of("sts")))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons

def test_a_run_with_fused_epilogues_trains_the_same_weights(tmp_path):
    "`--fused_epilogues true` in fp32 (aot_eager on CPU): the plain run's weights, said in the log and in metrics.json"
    from minbert_nb.commands import minbert_train
    args = ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--data_dir", SAMPLE, "--steps_per_epoch", "3", "--epochs", "1",
            "--batch_size", "4", "--train_limit", "16", "--dev_limit", "8", "--eval_batch_size", "8", "--sst_phrases", "false",
            "--amp", "off", "--compile_backend", "aot_eager", "--device", "cpu"]
    r0 = run_command(minbert_train, *args, "--out", tmp_path / "plain")
    r1 = run_command(minbert_train, *args, "--out", tmp_path / "fused", "--fused_epilogues", "true")
    assert r0.returncode == r1.returncode == 0, r1.stdout[-2000:] + r1.stderr[-2000:]
    assert "fused epilogues (aot_eager): 6 blocks, 0 kept plain" in r1.stdout
    a, b = (load_checkpoint(tmp_path / d / "last.pt")["model"] for d in ("plain", "fused"))
    assert all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)
    m = json.loads((tmp_path / "fused" / "metrics.json").read_text())
    assert m["fused_epilogues"] == dict(fused=6, plain=0) and json.loads((tmp_path / "plain" / "metrics.json").read_text())["fused_epilogues"] is None
