"Every head, pair mode and schedule on a tiny random-weight BERT"
import itertools
import pytest, torch
from minbert_nb.core import tiny_config, set_seed, count_params
from minbert_nb.bert import BertModel
from minbert_nb.multitask import ModelConfig, MultitaskBert, fake_batch
from minbert_nb.config import TrainConfig
from minbert_nb.train import task_loss
from minbert_nb.optimizer import AdamW, param_groups
from minbert_nb.samplers import ScheduleConfig, TaskSchedule

def _model(**kw):
    set_seed(0)
    return MultitaskBert(ModelConfig(**kw), bert=BertModel(tiny_config()))

VARIANTS = [dict(pooling=p, head_layers=h, pair_mode=m, pair_features=f, sts_head=s)
            for p, h, m, f, s in itertools.product(["cls", "pooler", "mean"], [1, 2], ["bi", "cross"], ["uv", "uvd", "uvdp"], ["features", "cosine"])
            if not (m == "cross" and (f != "uv" or s != "features"))]

@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_variant_shapes_losses_and_gradients(kw):
    m = _model(**kw).train()
    cfg = TrainConfig(**kw)
    for task in ("sst", "para", "sts"):
        m.zero_grad()
        b = fake_batch(task, pair_mode=kw["pair_mode"])
        out = m(b)
        assert out.pred.shape == ((3, 5) if task == "sst" else (3,))
        loss = task_loss(m, b, cfg)
        assert torch.isfinite(loss)
        loss.backward()
        # the backbone and this task's head get gradients; the other heads do not
        assert m.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
        for t, h in m.heads.items():
            g = sum(p.grad.abs().sum().item() for p in h.parameters() if p.grad is not None)
            assert (g > 0) == (t == task), (t, task, g)

def test_pretrain_mode_freezes_backbone():
    m = _model(pooling="mean", pair_features="uvd")
    m.set_mode("pretrain")
    before = {k: v.clone() for k, v in m.bert.state_dict().items()}
    heads_before = {k: v.clone() for k, v in m.heads.state_dict().items()}
    opt = AdamW(param_groups(m, dict(backbone=1e-3, head=1e-2)))
    assert all(not p.requires_grad for p in m.bert.parameters())
    cfg = TrainConfig(pooling="mean", pair_features="uvd", mode="pretrain")
    for task in ("sst", "para", "sts"):
        opt.zero_grad(); task_loss(m, fake_batch(task), cfg).backward(); opt.step()
    assert all(torch.equal(before[k], v) for k, v in m.bert.state_dict().items())
    assert any(not torch.equal(heads_before[k], v) for k, v in m.heads.state_dict().items())
    assert count_params(m, trainable=True) == sum(count_params(h) for h in m.heads.values())

def test_mnrl_adds_to_the_loss():
    m = _model(pooling="mean", sts_head="cosine").eval()
    b = fake_batch("para", B=6); b["labels"] = torch.tensor([1, 1, 1, 0, 1, 0])
    l0 = task_loss(m, b, TrainConfig(pooling="mean", sts_head="cosine"))
    l1 = task_loss(m, b, TrainConfig(pooling="mean", sts_head="cosine", mnrl_weight=1.0))
    assert l1 > l0

@pytest.mark.parametrize("kind", ["round_robin", "proportional", "sqrt", "annealed", "sequential", "simultaneous"])
def test_every_schedule_trains_a_tiny_model(kind):
    m = _model(pooling="mean", pair_features="uvd").train()
    cfg = TrainConfig(pooling="mean", pair_features="uvd", sampler=kind)
    sched = TaskSchedule(ScheduleConfig(kind=kind, steps_per_epoch=6 if kind not in ("round_robin", "sequential") else None),
                         {"sst": 4, "para": 5, "sts": 3}, total_epochs=2)
    opt = AdamW(param_groups(m, dict(backbone=1e-3, head=1e-3)))
    for epoch in (1, 2):
        plan = sched.plan(epoch)
        assert len(plan) > 0
        for step in plan:
            opt.zero_grad()
            loss = sum(task_loss(m, fake_batch(t, seed=len(step)), cfg) for t in step)
            assert torch.isfinite(loss); loss.backward(); opt.step()
        if kind == "simultaneous": assert all(len(s) == 3 for s in plan)
        else: assert all(len(s) == 1 for s in plan)

def test_para_prior_bias_shifts_predictions():
    m = _model().eval()
    b = fake_batch("para", B=8)
    m.para_logit_bias.fill_(100.0); assert m.predict(b).tolist() == [1] * 8
    m.para_logit_bias.fill_(-100.0); assert m.predict(b).tolist() == [0] * 8
