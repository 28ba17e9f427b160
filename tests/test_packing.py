"""Padding skipped from the host's lengths (what a GPU does, 02_bert `host_lengths`), checked on the CPU against the CPU's own
packing (from the mask): the same outputs and gradients in training, for every task layout and PEFT module; in evaluation
attention runs on the packed tokens (varlen: its reference loop here), equal to the padded attention"""
import torch, pytest
from minbert_nb.config import preset_config
from minbert_nb.multitask import MultitaskBert, fake_batch
from minbert_nb.bert import host_lengths, MPNetModel, tiny_mpnet_config
from datapaths import tiny_backbone_dir

def _batch(task, pair_mode):
    b = fake_batch(task, B=4, T=9, vocab=100, pair_mode=pair_mode, seed=1)
    if pair_mode == "cross":                                   # the other order, as pair_swap trains it: other lengths
        s = fake_batch(task, B=4, T=7, vocab=100, pair_mode=pair_mode, seed=2)["a"]
        s["attention_mask"][1, 4:] = 0; s["input_ids"][1, 4:] = 0
        b["a_swap"] = s
    return b

def _run(model, batch, seed):
    model.zero_grad(); torch.manual_seed(seed)
    out = model(batch)
    loss = out.pred.float().pow(2).mean() + out.u.float().pow(2).mean()
    if model.training: loss.backward()
    return out.pred.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

@pytest.mark.parametrize("peft,task,pair_mode", [("none", "sst", "bi"), ("none", "para", "cross"), ("none", "sts", "bi"), ("none", "sts", "both"),
                                                 ("pal", "para", "cross"), ("prefix", "sts", "bi"), ("adapter", "sst", "bi"), ("lora", "para", "cross")])
def test_host_lengths_give_the_cpu_packing(peft, task, pair_mode):
    pm = {"para": "cross"} if pair_mode == "cross" else {"sts": pair_mode} if pair_mode == "both" else None
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), peft=peft, out="unused", pair_modes=pm, pair_swap=True).model_config()
    torch.manual_seed(0); model = MultitaskBert(cfg)
    model.bert.pack_multiple = 1                              # the mask's packing without extra rows: the rows of the lengths' packing
    batch = _batch(task, pair_mode); hb = host_lengths(batch)
    assert hb["a"]["lengths"][0] == 7 and all("lengths" in hb[k] for k in ("a", "b", "x", "a_swap") if k in hb)
    model.train()
    (p0, g0), (p1, g1) = _run(model, batch, 5), _run(model, hb, 5)
    assert torch.equal(p0, p1), (p0, p1)                      # the same rows packed, the same dropout draws and coins
    assert g0.keys() == g1.keys() and all(torch.allclose(g0[k], g1[k], rtol=1e-5, atol=1e-7) for k in g0)
    model.eval()
    torch.testing.assert_close(_run(model, hb, 5)[0], _run(model, batch, 5)[0], rtol=1e-5, atol=1e-5)   # varlen attention where no prefix

def test_mpnet_packs_from_lengths_and_keeps_its_bias():
    "MPNet's relative-position bias needs the padded layout for attention: the layers stay packed, attention pads (its fallback)"
    torch.manual_seed(0); m = MPNetModel(tiny_mpnet_config()).eval()
    ids = torch.randint(5, 100, (3, 8)); am = torch.ones_like(ids); am[1, 5:] = 0; am[2, 2:] = 0; ids[am == 0] = 1
    hb = host_lengths({"input_ids": ids, "attention_mask": am})
    a, b = m(ids, am).last_hidden_state, m(ids, am, lengths=hb["lengths"]).last_hidden_state
    torch.testing.assert_close(a[am.bool()], b[am.bool()], rtol=1e-5, atol=1e-5)

def test_unpad_false_keeps_every_batch_padded(tmp_path):
    "`--unpad false`: the run's BERT never packs (said in metrics.json); by default it does, its rows rounded up to PACK_MULTIPLE or `--pack_multiple`"
    import json
    from minbert_nb.commands import minbert_train
    from datapaths import SAMPLE, run_command
    args = ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--data_dir", SAMPLE, "--steps_per_epoch", "2", "--epochs", "1",
            "--batch_size", "4", "--train_limit", "8", "--dev_limit", "4", "--eval_batch_size", "4", "--sst_phrases", "false", "--device", "cpu"]
    from minbert_nb.bert import PACK_MULTIPLE
    for flag, want, pack in ((["--unpad", "false"], False, None), ([], True, PACK_MULTIPLE), (["--pack_multiple", "1"], True, 1)):
        out = tmp_path / f"{want}-{pack}"
        r = run_command(minbert_train, *args, "--out", out, *flag)
        assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
        m = json.loads((out / "metrics.json").read_text())
        assert (m["unpad"], m["pack_multiple"]) == (want, pack), m
