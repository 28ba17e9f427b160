"Our AdamW against torch.optim.AdamW, and the schedules against their formulas"
import math
import pytest, torch
from torch import nn
from minbert_nb.core import set_seed
from minbert_nb.optimizer import AdamW, linear_schedule, noam_schedule, constant_schedule, make_scheduler, param_groups

def _run(opt_fn, steps=1000, dtype=torch.float32):
    set_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(dtype)
    X, y = torch.randn(128, 8, dtype=dtype), torch.randn(128, 1, dtype=dtype)
    opt = opt_fn(model.parameters())
    losses = []
    for _ in range(steps):
        opt.zero_grad(); loss = nn.functional.mse_loss(model(X), y); loss.backward(); opt.step(); losses.append(loss.item())
    return torch.cat([p.detach().flatten() for p in model.parameters()]), losses

# Our single-tensor and foreach paths against PyTorch's single-tensor AdamW: the same operations in the same order, so they
# agree to the last bit here in float32 and float64 (the bounds leave room for another CPU's kernels). The fused kernel (the
# default) rounds in its own order, and 1,000 steps carry that into the weights by an amount that depends on the CPU (below
# 1e-6 on an AVX2 CPU, 1.4e-6 on an AVX-512 one): it is held to 1e-5, a bound that a slightly wrong rule breaks (below).
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_adamw_matches_torch_1000_steps(wd, foreach, dtype, tol):
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=wd)
    ours, l1 = _run(lambda p: AdamW(p, correct_bias=True, foreach=foreach, fused=False, **kw), dtype=dtype)
    ref, l2 = _run(lambda p: torch.optim.AdamW(p, foreach=False, **kw), dtype=dtype)
    diff = (ours - ref).abs().max().item()
    print(f"wd={wd} foreach={foreach} {dtype}: max |param diff| after 1000 steps = {diff:.2e}")
    assert diff <= tol
    assert l1[-1] < l1[0]

@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_fused_adamw_matches_torch_1000_steps(wd):
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=wd)
    ours, l1 = _run(lambda p: AdamW(p, correct_bias=True, **kw))          # the default: fused on the CPU
    ref, _ = _run(lambda p: torch.optim.AdamW(p, foreach=False, **kw))
    assert (ours - ref).abs().max().item() <= 1e-5 and l1[-1] < l1[0]

def test_adamw_float32_bound_catches_a_wrong_rule():
    "The float32 bound is no bound at all unless a slightly wrong rule breaks it: eps outside the square root's bias correction"
    kw = dict(lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
    ours, _ = _run(lambda p: AdamW(p, correct_bias=True, fused=False, eps=1e-6, **kw))
    wrong, _ = _run(lambda p: torch.optim.AdamW(p, foreach=False, eps=2e-6, **kw))
    assert (ours - wrong).abs().max().item() > 1e-5

@pytest.mark.parametrize("foreach", [False, True])
def test_adamw_without_bias_correction(foreach):
    "correct_bias=False: the update is lr * m / (sqrt(v) + eps) with raw (biased) moments"
    p = nn.Parameter(torch.tensor([1.0])); opt = AdamW([p], lr=0.1, eps=1e-6, correct_bias=False, foreach=foreach)
    m = v = 0.0; x = 1.0
    for g in [0.5, -1.0, 2.0]:
        p.grad = torch.tensor([g]); opt.step()
        m = 0.9 * m + 0.1 * g; v = 0.999 * v + 0.001 * g * g
        x = x - 0.1 * m / (math.sqrt(v) + 1e-6)
        assert abs(p.item() - x) < 1e-6
    # and it differs from the corrected one
    q = nn.Parameter(torch.tensor([1.0])); o2 = AdamW([q], lr=0.1, correct_bias=True)
    q.grad = torch.tensor([0.5]); o2.step()
    assert abs(q.item() - 0.9) < 1e-5

def test_adamw_param_groups_own_lr():
    a, b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    opt = AdamW([{"params": [a], "lr": 1e-1}, {"params": [b], "lr": 1e-3}])
    a.grad = b.grad = torch.ones(2); opt.step()
    assert torch.allclose(a, torch.full((2,), 0.9), atol=1e-5) and torch.allclose(b, torch.full((2,), 0.999), atol=1e-6)

def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="learning rate"): AdamW([nn.Parameter(torch.ones(1))], lr=-1)
    with pytest.raises(ValueError, match="betas"): AdamW([nn.Parameter(torch.ones(1))], betas=(1.0, 0.9))

@pytest.mark.parametrize("t", [0, 1, 37, 99, 100, 101, 500, 999, 1000])
def test_schedules_formulas(t):
    T, w = 1000, 100
    exp_lin = t / w if t < w else max(0.0, (T - t) / (T - w))
    exp_noam = t / w if t < w else math.sqrt(w / t)
    assert math.isclose(linear_schedule(T, 0.1)(t), exp_lin, abs_tol=1e-12)
    assert math.isclose(noam_schedule(T, 0.1)(t), exp_noam, abs_tol=1e-12)
    assert math.isclose(noam_schedule(T, w)(t), exp_noam, abs_tol=1e-12)   # int warmup = steps
    assert constant_schedule(T, w)(t) == (t / w if t < w else 1.0)

def test_linear_matches_transformers():
    from transformers import get_linear_schedule_with_warmup
    def lrs(make):
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2e-5); sch = make(opt); out = []
        for _ in range(300): out.append(opt.param_groups[0]["lr"]); opt.step(); sch.step()
        return out
    ours = lrs(lambda o: make_scheduler(o, "linear", 300, 30))
    ref = lrs(lambda o: get_linear_schedule_with_warmup(o, 30, 300))
    assert max(abs(a - b) for a, b in zip(ours, ref)) < 1e-15

def test_scheduler_keeps_group_base_rates():
    m = nn.ModuleDict({"bert": nn.Linear(2, 2), "head": nn.Linear(2, 1)})
    opt = AdamW(param_groups(m, {"backbone": 1e-5, "head": 1e-3}))
    sch = make_scheduler(opt, "noam", 100, 10)
    for _ in range(40): opt.step(); sch.step()
    ratio = noam_schedule(100, 10)(40)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-5 * ratio, 1e-5 * ratio, 1e-3 * ratio, 1e-3 * ratio])
    with pytest.raises(ValueError, match="unknown"): make_scheduler(opt, "cosine-ish", 10)
