"PCGrad (Yu et al. 2020, Algorithm 1) against closed forms, a plain transcription of the algorithm, and per-task backward passes"
import csv, itertools, math, random
import pytest, torch
from torch import nn
from minbert_nb.core import tiny_config, set_seed
from minbert_nb.bert import BertModel
from minbert_nb.multitask import MultitaskBert, ModelConfig, fake_batch
from minbert_nb.losses import sst_loss, para_loss, sts_loss
from minbert_nb.pcgrad import (pcgrad, pcgrad_orders, project_conflicting, task_of, split_params, shared_params, flatten_grads,
                               assign_flat_grad, task_gradients, PCGrad, grad_cosines, GradConflictLog)
from datapaths import tiny_backbone_dir

def _t(*xs): return torch.tensor(xs, dtype=torch.float64)

def _algorithm_1(grads, orders):
    "Algorithm 1 written out on Python floats: g_i^PC tested and projected against the original g_j, j != i, in `orders[i]`"
    G = [[float(x) for x in (g.tolist() if isinstance(g, torch.Tensor) else g)] for g in grads]
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    out = []
    for i, gi in enumerate(G):
        pc = list(gi)
        for j in orders[i]:
            d = dot(pc, G[j])
            if d < 0:
                c = d / dot(G[j], G[j])                                           # once per projection, not per entry
                pc = [p - c * q for p, q in zip(pc, G[j])]
        out.append(pc)
    return [sum(col) for col in zip(*out)]

# ---- the update rule on hand-made gradients ----------------------------------------------------------------------------
def test_two_tasks_at_120_degrees():
    c, s = math.cos(2 * math.pi / 3), math.sin(2 * math.pi / 3)
    g1, g2 = _t(1, 0), _t(c, s)
    pc = project_conflicting([g1, g2])
    assert torch.allclose(pc[0], _t(0.75, math.sqrt(3) / 4)) and torch.allclose(pc[1], _t(0, math.sqrt(3) / 2))
    assert torch.allclose(pcgrad([g1, g2]), _t(0.75, 3 * math.sqrt(3) / 4))
    assert torch.allclose(pcgrad([g1, g2]), 1.5 * (g1 + g2))                   # (1 - cos 120) (g1 + g2) for unit vectors
    # general two-task closed form, unequal norms: g1 + g2 - (g1.g2)(g1/|g1|^2 + g2/|g2|^2)
    a, b = _t(3, 0, 1), _t(-2, 2, 0)
    d = a @ b; assert d < 0
    assert torch.allclose(pcgrad({"a": a, "b": b}), a + b - d * (a / (a @ a) + b / (b @ b)))
    assert pcgrad([a, b]) @ a >= 0 and pcgrad([a, b]) @ b >= 0                 # two tasks: no conflict with either

def test_three_tasks_by_hand_and_the_order():
    G = [_t(1, 0), _t(-1, 2), _t(-1, -2)]
    fixed = [[1, 2], [0, 2], [0, 1]]
    pc = project_conflicting(G, orders=fixed)
    assert torch.allclose(pc[0], _t(12, -6) / 25) and torch.allclose(pc[1], _t(-0.8, 0.4)) and torch.allclose(pc[2], _t(-0.8, -0.4))
    assert torch.allclose(pcgrad(G, orders=fixed), _t(-28, -6) / 25)
    assert torch.allclose(project_conflicting(G, orders=[[2, 1], [0, 2], [0, 1]])[0], _t(12, 6) / 25)   # the order matters
    assert abs(pc[0] @ G[2]) < 1e-12 and pc[0] @ G[1] < 0                     # only the last projection holds
    possible = [pcgrad(G, orders=list(o)) for o in itertools.product(([1, 2], [2, 1]), ([0, 2], [2, 0]), ([0, 1], [1, 0]))]
    seen = set()
    for seed in range(30):
        r = pcgrad(G, torch.Generator().manual_seed(seed))
        hits = [k for k, p in enumerate(possible) if torch.allclose(r, p)]
        assert hits; seen.add(hits[0])
        assert torch.equal(r, pcgrad(G, orders=pcgrad_orders(3, torch.Generator().manual_seed(seed))))   # the orders it draws
        assert torch.equal(r, pcgrad(G, torch.Generator().manual_seed(seed)))                        # deterministic
    assert len(seen) > 1                                                       # the order really is random

def test_pcgrad_orders_draws_one_permutation_per_task():
    g = torch.Generator().manual_seed(5)
    o = pcgrad_orders(4, g)
    g2 = torch.Generator().manual_seed(5)
    for i in range(4):
        others = [j for j in range(4) if j != i]
        assert o[i] == [others[k] for k in torch.randperm(3, generator=g2).tolist()]
    torch.manual_seed(1); a = pcgrad_orders(5)
    torch.manual_seed(1); assert pcgrad_orders(5) == a                         # no generator: torch's global one

@pytest.mark.parametrize("T", [2, 3, 4, 5])
def test_matches_algorithm_1_transcription(T):
    g = torch.Generator().manual_seed(T)
    for _ in range(20):
        G = [torch.randn(7, generator=g, dtype=torch.float64) for _ in range(T)]
        orders = pcgrad_orders(T, g)
        assert torch.allclose(pcgrad(G, orders=orders), torch.tensor(_algorithm_1(G, orders), dtype=torch.float64), atol=1e-12)

def test_two_tasks_equal_the_seeds_library_rule():
    "Tseng's Pytorch-PCGrad (Chan (003) and Wang (004)) loops over all tasks including i and averages: the same as reduction='mean' for two tasks"
    def library_rule(G, rng):
        pc = [g.clone() for g in G]
        for gi in pc:
            others = list(G); rng.shuffle(others)
            for gj in others:
                d = gi @ gj
                if d < 0: gi -= d * gj / gj.norm() ** 2
        return torch.stack(pc).mean(0)
    g, rng = torch.Generator().manual_seed(0), random.Random(0)
    for _ in range(20):
        G = [torch.randn(6, generator=g, dtype=torch.float64) for _ in range(2)]
        assert torch.allclose(pcgrad(G, reduction="mean"), library_rule(G, rng))

def test_no_conflict_is_exactly_the_plain_sum():
    G = [torch.tensor([1.0, 0.0, 0.0]), torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0.0, 1.0, 1.0])]
    for seed in range(5): assert torch.equal(pcgrad(G, torch.Generator().manual_seed(seed)), torch.stack(G).sum(0))
    g = torch.Generator().manual_seed(0)
    P = [torch.rand(100, generator=g) for _ in range(4)]                        # positive entries: every dot product > 0
    assert torch.equal(pcgrad(P), torch.stack(P).sum(0))
    assert torch.equal(pcgrad(P, reduction="mean"), torch.stack(P).mean(0))

def test_conflicting_pair_ends_orthogonal():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        u, v = torch.randn(30, generator=g, dtype=torch.float64), torch.randn(30, generator=g, dtype=torch.float64)
        if u @ v >= 0: v = -v
        pc = project_conflicting({"u": u, "v": v})
        assert abs(pc["u"] @ v) < 1e-10 and abs(pc["v"] @ u) < 1e-10
        assert torch.allclose(pcgrad([2.5 * u, 2.5 * v]), 2.5 * pcgrad([u, v]))   # homogeneous: loss scaling commutes

def test_zero_gradients():
    z, a = torch.zeros(3), torch.tensor([1.0, -2.0, 0.5])
    assert torch.equal(pcgrad([z, a]), a) and torch.equal(pcgrad([a, z, -a * 0]), a)
    assert torch.equal(pcgrad([z, z, z]), z)
    r = pcgrad([torch.tensor([1e30, 0.0]), torch.tensor([-1e-30, 0.0])])       # ||g_j||^2 underflows to 0 in float32
    assert torch.isfinite(r).all()
    assert torch.equal(pcgrad([torch.zeros(0), torch.zeros(0)]), torch.zeros(0))

def test_input_checks():
    with pytest.raises(ValueError, match="no task gradients"): pcgrad([])
    with pytest.raises(ValueError, match="differ in length"): pcgrad([torch.ones(2), torch.ones(3)])
    with pytest.raises(ValueError, match=r"flat \(N,\)"): pcgrad([torch.ones(2, 2)])
    with pytest.raises(ValueError, match="'sum' or 'mean'"): pcgrad([torch.ones(2)], reduction="max")
    assert pcgrad([torch.ones(2, dtype=torch.bfloat16)]).dtype == torch.float32

# ---- parameters and per-task gradients on a tiny MultitaskBert ----------------------------------------------------------
LOSS = dict(sst=sst_loss, para=para_loss, sts=sts_loss)
BATCHES = {t: fake_batch(t, seed=i) for i, t in enumerate(LOSS)}

def _losses(m, tasks=tuple(LOSS)): return {t: LOSS[t](m(BATCHES[t]).pred, BATCHES[t]["labels"]) for t in tasks}

@pytest.fixture(scope="module")
def tiny():
    set_seed(0)
    return MultitaskBert(ModelConfig(), bert=BertModel(tiny_config())).eval()

@pytest.fixture(scope="module")
def ref(tiny):
    "{task: {name: .grad}} after each task's loss alone is back-propagated"
    out = {}
    for t in LOSS:
        tiny.zero_grad(set_to_none=True); _losses(tiny, (t,))[t].backward()
        out[t] = {n: None if p.grad is None else p.grad.clone() for n, p in tiny.named_parameters()}
    tiny.zero_grad(set_to_none=True)
    return out

def _summed(m, ref, tasks):
    out = {}
    for n, _ in m.named_parameters():
        gs = [ref[t][n] for t in tasks if ref[t][n] is not None]
        out[n] = sum(gs) if gs else None
    return out

def _check(m, want, eps=1e-6):
    for n, p in m.named_parameters():
        if want[n] is None: assert p.grad is None, n
        else: assert torch.allclose(p.grad, want[n], atol=eps), n

def test_split_params():
    set_seed(0)
    m = MultitaskBert(ModelConfig(), bert=BertModel(tiny_config()))
    sh, own = split_params(m)
    assert set(own["para"]) == {"heads.para.net.1.weight", "heads.para.net.1.bias"} and all(n.startswith("bert.") for n in sh)
    assert len(sh) + sum(map(len, own.values())) == len(list(m.parameters()))
    m = MultitaskBert(ModelConfig(peft="pal,prefix,adapter,lora", pal_size=12, adapter_size=4, lora_r=2, prefix_len=2,
                                  prefix_mlp=True, mode="pretrain"), bert=BertModel(tiny_config()))
    sh, own = split_params(m)
    assert sh and all("lora_" in n for n in sh)          # per-task LayerNorms (adapters' default) belong to their task
    for t in LOSS:
        names = set(own[t])
        for key in ("adapter_by_task", "layernorm_by_task", "pal_attention", "pal_encoder", "pal_decoder", "prefix_embedding", "prefix_mlp", "heads"):
            assert any(key in n for n in names), (t, key)
        assert all(t in n.split(".") for n in names)
    assert [id(p) for p in shared_params(m)] == [id(p) for p in sh.values()]
    assert task_of("bert.encoder.layer.0.output.dense.weight", LOSS) is None
    with pytest.raises(ValueError, match="pass `tasks`"): split_params(nn.Linear(2, 2))

def test_task_gradients_equal_per_task_backward(tiny, ref):
    sh = split_params(tiny)[0]
    tg = task_gradients(_losses(tiny), sh.values())
    assert list(tg) == list(LOSS)
    for t in LOSS:
        want = torch.cat([(ref[t][n] if ref[t][n] is not None else torch.zeros_like(p)).reshape(-1) for n, p in sh.items()])
        assert torch.equal(tg[t], want)
    assert all(p.grad is None for p in tiny.parameters())                      # .grad untouched
    assert task_gradients({"x": torch.tensor(2.0)}, sh.values())["x"].abs().sum() == 0

def test_flatten_and_assign_round_trip(tiny):
    ps = shared_params(tiny)
    flat = torch.randn(sum(p.numel() for p in ps), generator=torch.Generator().manual_seed(0))
    assign_flat_grad(ps, flat); assert torch.equal(flatten_grads(ps), flat)
    assign_flat_grad(ps, flat, add=True); assert torch.allclose(flatten_grads(ps), 2 * flat)
    mask = [k % 2 == 0 for k in range(len(ps))]
    tiny.zero_grad(set_to_none=True); assign_flat_grad(ps, flat, mask=mask)
    assert all((p.grad is None) != m for p, m in zip(ps, mask))
    with pytest.raises(ValueError, match="got a vector of shape"): assign_flat_grad(ps, flat[:-1])
    tiny.zero_grad(set_to_none=True)

def test_without_surgery_equals_summed_backward(tiny, ref):
    tiny.zero_grad(set_to_none=True)
    grads = PCGrad(tiny, surgery=False).backward(_losses(tiny))
    _check(tiny, _summed(tiny, ref, LOSS))
    assert tiny.bert.pooler.dense.weight.grad is None                         # 'cls' pooling never reaches the pooler
    assert list(grads) == list(LOSS)
    tiny.zero_grad(set_to_none=True)

def test_pcgrad_without_conflict_equals_sum_of_backward(tiny, ref):
    tiny.zero_grad(set_to_none=True)
    grads = PCGrad(tiny).backward(_losses(tiny, ("sst", "para")))
    assert grad_cosines(grads)[("sst", "para")] > 0                            # the precondition: these two do not conflict
    _check(tiny, _summed(tiny, ref, ("sst", "para")))
    tiny.zero_grad(set_to_none=True)

def test_pcgrad_with_conflict(tiny, ref):
    tiny.zero_grad(set_to_none=True)
    grads = PCGrad(tiny, generator=torch.Generator().manual_seed(2)).backward(_losses(tiny))
    assert grad_cosines(grads)[("sst", "sts")] < 0
    sh, own = split_params(tiny)
    got = flatten_grads(sh.values())
    assert torch.allclose(got, pcgrad(grads, torch.Generator().manual_seed(2)), atol=1e-6)
    assert (got - sum(grads.values())).abs().max() > 1e-4
    for t in LOSS:                                                             # task-specific: their own gradient
        for n, p in own[t].items(): assert torch.allclose(p.grad, ref[t][n], atol=1e-6)
    tiny.zero_grad(set_to_none=True)

def test_add_apply_accumulates_like_backward(tiny):
    tiny.zero_grad(set_to_none=True)
    pc = PCGrad(tiny, surgery=False)
    g1 = pc.backward(_losses(tiny, ("sts",)))["sts"]
    for _ in range(2): pc.add("sts", _losses(tiny, ("sts",))["sts"])
    assert torch.allclose(pc.apply()["sts"], 2 * g1, atol=1e-6)
    assert torch.allclose(flatten_grads(pc.shared), 3 * g1, atol=1e-6)
    assert pc.apply() == {} and pc.grads == {}
    tiny.zero_grad(set_to_none=True)

def test_frozen_backbone_and_errors():
    m = MultitaskBert(ModelConfig(mode="pretrain"), bert=BertModel(tiny_config()))
    pc = PCGrad(m); assert pc.shared == []
    assert pc.backward(_losses(m))["sst"].numel() == 0
    assert m.heads.sst.net[1].weight.grad is not None and m.bert.embeddings.word_embeddings.weight.grad is None
    with pytest.raises(ValueError, match="'sum' or 'mean'"): PCGrad(m, reduction="max")
    class FakeDDP(nn.parallel.DistributedDataParallel):
        def __init__(self): nn.Module.__init__(self)
    with pytest.raises(NotImplementedError, match="one process only"): PCGrad(FakeDDP())

# ---- conflict diagnostics -----------------------------------------------------------------------------------------------
def test_grad_cosines():
    c = grad_cosines({"sst": _t(1, 0), "para": _t(-1, 1), "sts": _t(0, 2), "x": _t(0, 0)})
    assert list(c) == [("sst", "para"), ("sst", "sts"), ("sst", "x"), ("para", "sts"), ("para", "x"), ("sts", "x")]
    assert math.isclose(c[("sst", "para")], -1 / math.sqrt(2), rel_tol=1e-6) and c[("sst", "sts")] == 0
    assert math.isnan(c[("para", "x")])
    assert grad_cosines([torch.ones(3)]) == {}

def test_grad_conflict_log(tmp_path):
    log = GradConflictLog()
    for k in range(1, 9):                                                      # para flips every step; sts conflicts 1 in 4
        log.record(5 * k, k // 5, {"sst": _t(1, 0), "para": _t((-1) ** k, 1), "sts": _t(-1 if k % 4 == 0 else 1, 1)})
    log.record(45, 1, {"sst": _t(0, 0), "para": _t(1, 1), "sts": _t(1, 1)})  # zero gradient: NaN, left out
    s = log.summary()
    assert list(s) == ["sst-para", "sst-sts", "para-sts"]
    assert s["sst-para"] == dict(mean_cosine=0.0, frac_conflicting=0.5, n=8)
    assert s["sst-sts"]["frac_conflicting"] == 0.25 and s["sst-sts"]["n"] == 8
    assert math.isclose(s["sst-sts"]["mean_cosine"], (6 - 2) / 8 / math.sqrt(2), rel_tol=1e-6)
    assert s["para-sts"]["n"] == 9
    p = log.to_csv(tmp_path / "run" / "grad_conflicts.csv")
    rows = list(csv.DictReader(open(p)))
    assert list(rows[0]) == ["step", "epoch", "task_a", "task_b", "cosine"] and len(rows) == 27
    assert rows[0]["step"] == "5" and rows[0]["task_a"] == "sst" and rows[0]["task_b"] == "para"
    assert GradConflictLog.from_csv(p).summary() == s
    log.plot(tmp_path / "grad_conflicts.png")
    assert (tmp_path / "grad_conflicts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert GradConflictLog().summary() == {}

# ---- gradient accumulation: one surgery per optimizer step, on the window's accumulated task gradients ------------------
from minbert_nb.step import TrainStep, SumGrads, base_loss
from minbert_nb.pcgrad import PCGradGrads

ACCUM_B = 8                                            # rows per task batch; halves of 4 (seeds chosen so the tasks conflict)
ACCUM_BATCHES = {t: fake_batch(t, B=ACCUM_B, seed=i) for i, t in enumerate(LOSS)}

def _rows(b, sl):
    "Rows `sl` of a fake batch: every tensor and list cut along the batch dimension"
    if isinstance(b, dict): return {k: _rows(v, sl) for k, v in b.items()}
    return b[sl] if isinstance(b, (torch.Tensor, list)) else b

def _orders(n, g):
    "PCGrad's documented draw, written out: for each task i in turn, the other tasks permuted by one randperm(n - 1)"
    return [[[j for j in range(n) if j != i][k] for k in torch.randperm(n - 1, generator=g).tolist()] for i in range(n)]

class _Record:
    "A stand-in optimizer for `TrainStep`: keeps the `.grad` of every parameter at each `step()` and changes no weight"
    def __init__(self, m): self.m, self.seen = m, []
    def step(self): self.seen.append({n: None if p.grad is None else p.grad.detach().clone() for n, p in self.m.named_parameters()})
    def zero_grad(self, set_to_none=True): self.m.zero_grad(set_to_none=True)

def _accum_model():
    set_seed(0)
    return MultitaskBert(ModelConfig(), bert=BertModel(tiny_config())).eval()   # eval: no dropout, the same function every call

def _reference(tasks, seed):
    """The whole-batch update by plain autograd and the test's own Algorithm 1: each task's gradient of its whole-batch loss;
    on the shared parameters (all but `heads.`, the model has no PEFT) Algorithm 1 with the first order drawn from a generator
    seeded like PCGradGrads's; each head its own task's gradient. Returns ({name: grad or None}, {task: flat shared grad})"""
    m = _accum_model()
    per = {}
    for t in tasks:
        m.zero_grad(set_to_none=True)
        b = ACCUM_BATCHES[t]; base_loss(t, m(b), b["labels"]).backward()
        per[t] = {n: None if p.grad is None else p.grad.detach().double().clone() for n, p in m.named_parameters()}
    shapes = {n: p.shape for n, p in m.named_parameters()}
    shared = [n for n in shapes if not n.startswith("heads.")]
    flat = {t: torch.cat([(per[t][n] if per[t][n] is not None else torch.zeros(shapes[n], dtype=torch.float64)).reshape(-1)
                          for n in shared]) for t in tasks}
    G = [flat[t] for t in tasks]
    assert min(G[i] @ G[j] for i in range(len(G)) for j in range(i + 1, len(G))) < 0     # a conflict: the surgery acts
    pc = torch.tensor(_algorithm_1(G, _orders(len(G), torch.Generator().manual_seed(seed))), dtype=torch.float64)
    want, k = {}, 0
    for n in shapes:
        reached = [per[t][n] for t in tasks if per[t][n] is not None]
        if n in shared:
            piece = pc[k:k + shapes[n].numel()].view(shapes[n]); k += shapes[n].numel()
            want[n] = piece if reached else None
        else: want[n] = sum(reached) if reached else None                              # a head: only its task reaches it
    return want, flat

def _train_step(transform, accum, tasks, seed):
    "One optimizer step of `TrainStep` on the task batches: whole (accum=1) or in `accum` equal slices, updating after the last"
    m = _accum_model()
    rec = _Record(m)
    st = TrainStep(m, m, rec, transform=transform(m, seed), grad_accum=accum)
    n = ACCUM_B // accum
    task_grads = []
    for k in range(accum):
        st.step([(t, _rows(ACCUM_BATCHES[t], slice(k * n, (k + 1) * n))) for t in tasks], update=k == accum - 1)
        task_grads.append(st.task_grads)
    assert len(rec.seen) == 1
    return rec.seen[0], task_grads

def _max_diff(got, want):
    assert got.keys() == want.keys()
    for n in want: assert (got[n] is None) == (want[n] is None), n
    return max((got[n].double() - want[n]).abs().max().item() for n in want if want[n] is not None)

PC = lambda m, seed: PCGradGrads(m, m.cfg.tasks, seed=seed)

@pytest.mark.parametrize("tasks", [("para", "sts"), ("sst", "para", "sts")])
def test_grad_accum_2_on_halves_equals_grad_accum_1_on_the_whole_batch(tasks):
    "PCGrad with --grad_accum 2 on the two halves of each task's batch: the same update as one step on the whole batch"
    for seed in (0, 1):
        want, flat = _reference(tasks, seed)
        scale = max(v.abs().max().item() for v in want.values() if v is not None)
        whole, tg1 = _train_step(PC, 1, tasks, seed)
        assert _max_diff(whole, want) < 1e-6 * scale                                  # the reference is PCGrad on one step
        halves, tg2 = _train_step(PC, 2, tasks, seed)
        assert _max_diff(halves, want) < 1e-6 * scale, _max_diff(halves, want)       # one surgery, on the accumulated gradients
        assert tg2[0] is None and list(tg2[1]) == list(tasks)                         # task gradients: once per optimizer step,
        for t in tasks: assert torch.allclose(tg2[1][t].double(), flat[t], atol=1e-6 * scale)   # those of the whole window

def test_grad_accum_leaves_plain_summed_training_unchanged():
    "SumGrads: --grad_accum 2 on the halves is the gradient of the whole batch's summed loss, as before"
    tasks = tuple(LOSS)
    halves, tg = _train_step(lambda m, s: SumGrads(), 2, tasks, 0)
    assert tg == [None, None]
    m = _accum_model()
    sum(base_loss(t, m(ACCUM_BATCHES[t]), ACCUM_BATCHES[t]["labels"]) for t in tasks).backward()
    want = {n: None if p.grad is None else p.grad.double() for n, p in m.named_parameters()}
    scale = max(v.abs().max().item() for v in want.values() if v is not None)
    assert _max_diff(halves, want) < 1e-6 * scale

# ---- in a real (tiny) run: surgery once per optimizer step, and a stop asked for mid-window resumes exactly -----------------
def _train_args(out, data, *extra):
    return ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--out", str(out), "--data_dir", str(data), "--epochs", "1", "--steps_per_epoch", "4",
            "--batch_size", "4", "--train_limit", "32", "--dev_limit", "16", "--eval_batch_size", "16", "--checkpoint_every", "0",
            "--hidden_dropout", "0.1", "--predict_test", "false", "--sst_phrases", "false",
            "--pcgrad", "true", "--sampler", "simultaneous", "--grad_accum", "2", *extra]

def test_pcgrad_grad_accum_run_does_one_surgery_per_update_and_resumes_mid_window(tmp_path, small_data, monkeypatch):
    import os, signal
    import minbert_nb.step as S, minbert_nb.pcgrad as P
    from minbert_nb.train import train
    from minbert_nb.config import config_from_args
    from minbert_nb.checkpoint import load_checkpoint, TrainingInterrupted
    ends, real_end = [], P.PCGradGrads.end_step
    def end_step(self):
        g = real_end(self); ends.append(list(g)); return g
    monkeypatch.setattr(P.PCGradGrads, "end_step", end_step)
    train(config_from_args(_train_args(tmp_path / "full", small_data)), progress=False)
    full = load_checkpoint(tmp_path / "full" / "last.pt")
    assert full["progress"]["step"] == 2 and ends == [["sst", "para", "sts"]] * 2   # 4 micro-steps, 2 updates, 2 surgeries
    calls, real_loss = {"n": 0}, S.base_loss                   # Ctrl-C at the first task loss: the middle of the first window
    def loss(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1: os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*a, **k)
    monkeypatch.setattr(S, "base_loss", loss)
    with pytest.raises(TrainingInterrupted, match="step 2/4"): train(config_from_args(_train_args(tmp_path / "cut", small_data)), progress=False)
    monkeypatch.setattr(S, "base_loss", real_loss)
    cut = load_checkpoint(tmp_path / "cut" / "last.pt")
    assert cut["progress"]["i"] == 2 and cut["progress"]["step"] == 1                 # saved at the window's end, not inside it
    train(config_from_args(["--resume", str(tmp_path / "cut")]), progress=False, resume=True)
    a, b = full["model"], load_checkpoint(tmp_path / "cut" / "last.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert len(ends) == 2 + 1 + 1
