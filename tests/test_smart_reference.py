"""SMART's smoothness term against an independent float32 reference written here from Algorithm 1 of Jiang et al. (2020),
on the default model (embedded all-MiniLM-L6-v2): `SmartTerm` under float32 AND under bf16 autocast must take the same
adversarial steps and give the same R_s as the reference, with the preset's settings and with the paper's.

The reference uses nothing of `minbert_nb.smart`: its own hook on the embeddings, its own ℓ_s (two KL divergences summed,
or the squared error), its own normalised ascent step and projection. It shares with `SmartTerm` only what must be shared
for the comparison: the starting noise (a `torch.Generator` seeded as the term's), and the dropout masks (eval mode, or the
step's saved random state replayed)."""
import contextlib
import pytest, torch
import torch.nn.functional as F
from minbert_nb.multitask import MultitaskBert, ModelConfig, fake_batch
from minbert_nb.step import StepContext, TrainStep, base_loss, save_rng
from minbert_nb.smart import SmartTerm

CPU = torch.device("cpu")
SETTINGS = {"preset": dict(eps=0.02, step=0.02, noise=1e-5),      # TrainConfig's defaults (smart_eps, smart_step, smart_noise)
            "paper": dict(eps=1e-5, step=1e-3, noise=1e-5)}        # Jiang et al. (2020): ε = σ = 1e-5, η = 1e-3
SEED = 7

@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return MultitaskBert(ModelConfig())          # the default model: embedded all-MiniLM-L6-v2, [CLS], bi-encoder pairs

def _batch(task, seed=1): return fake_batch(task, B=4, T=12, vocab=30000, seed=seed)

# ---------------------------------------------------------------- the reference (Algorithm 1, float32, by hand)
def ell_s(task, p, q):
    "ℓ_s(p, q): KL(P‖Q) + KL(Q‖P) of the heads' distributions (SST: softmax of 5 logits; Quora: Bernoulli of one logit), squared error (STS)"
    if task == "sst": lp, lq = F.log_softmax(p, -1), F.log_softmax(q, -1)
    elif task == "para":                          # Bernoulli(σ(a)) as two classes: log σ(a), log(1 - σ(a)) = log σ(-a)
        # in float64: near δ = 0 the two logits differ by a few float32 ulps, and this definitional form cancels to exactly 0
        # in float32 (no gradient, no step), as it did on one CPU for a pair whose logit moved by 3 ulps
        lp, lq = (torch.stack([F.logsigmoid(-z), F.logsigmoid(z)], -1) for z in (p.double(), q.double()))
    else: return ((p - q) ** 2).mean()
    kl = lambda la, lb: (la.exp() * (la - lb)).sum(-1)
    return (kl(lp, lq) + kl(lq, lp)).mean()

@contextlib.contextmanager
def _embeddings_plus(model, delta=None, shape=None):
    "Inside: the output of `model.bert.embeddings` is x + `delta` (x + 0 with `delta` None; its shape goes into `shape`)"
    def hook(mod, inp, out):
        if shape is not None: shape.append(out.shape)
        return out if delta is None else out + delta
    h = model.bert.embeddings.register_forward_hook(hook)
    try: yield
    finally: h.remove()

def reference(model, batch, eps, step, noise, iters=1, seed=SEED, rng=None):
    """Algorithm 1 in float32: x = the embedding output; δ₀ ~ N(0, σ²) (then projected to the ∞-ball, as minbert_nb does);
    `iters` times g = ∇_δ ℓ_s(f(x + δ), f(x)) with f(x) held fixed, δ <- Π_ε(δ + η g / ‖g‖_∞), the norm per token;
    R_s = ℓ_s(f(x + δ), f(x)). `rng`: the random state every forward starts from (the step's dropout masks)."""
    task = batch["task"]
    def f(delta=None, shape=None):
        with contextlib.ExitStack() as s:
            s.enter_context(torch.autocast("cpu", enabled=False))
            if rng is not None: s.enter_context(torch.random.fork_rng(devices=[])); torch.set_rng_state(rng)
            s.enter_context(_embeddings_plus(model, delta, shape))
            return model(batch).pred.float()
    shape = []
    clean = f(shape=shape)
    d0 = (torch.randn(shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float32) * noise).clamp(-eps, eps)
    delta = d0
    for _ in range(iters):
        delta = delta.clone().requires_grad_()
        g, = torch.autograd.grad(ell_s(task, f(delta), clean.detach()), delta)
        norm = g.abs().amax(-1, keepdim=True)                      # ‖g‖_∞ of each token's C coordinates
        g = torch.where(norm > 0, g / norm.clamp_min(torch.finfo(g.dtype).tiny), torch.zeros_like(g))
        delta = (delta.detach() + step * g).clamp(-eps, eps)
    return d0, delta.detach(), ell_s(task, f(delta), clean).detach()

# ---------------------------------------------------------------- minbert_nb's SmartTerm, as the training step calls it
def ours(model, batch, amp, eps, step, noise, iters=1, seed=SEED):
    ctx = StepContext(model, CPU, amp, rng=save_rng(CPU))
    with ctx.autocast(): out = model(batch)                        # the step's own forward (bf16 under autocast)
    term = SmartTerm(weight=1.0, eps=eps, step=step, iters=iters, noise=noise, seed=seed)
    r = term(model, batch, out, ctx)
    return term, r

def compare(d0, ref_delta, ref_r, delta, r):
    "Per sequence (row of the embedding output): did it step, the cosine of its step with the reference's; and R_s / R_s(ref)"
    a, b = (ref_delta - d0).flatten(1), (delta.detach().float() - d0).flatten(1)
    stepped_ref, stepped = a.abs().amax(1) > 0, b.abs().amax(1) > 0
    cos = F.cosine_similarity(a, b, dim=1, eps=1e-30)
    return stepped_ref, stepped, cos, float(r.detach()) / float(ref_r)

@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("task", ["sst", "para", "sts"])
def test_smart_bf16_and_fp32_match_algorithm1_reference(model, task, setting):
    "Eval mode: every sequence that steps in the reference steps, the same way (cos >= 0.9 each), and R_s within x1.5, under fp32 and bf16"
    model.eval(); kw = SETTINGS[setting]; b = _batch(task)
    d0, ref_delta, ref_r = reference(model, b, **kw)
    assert float(ref_r) > 0
    for amp, cos_min, ratio_tol in ((None, 0.999, 1.01), (torch.bfloat16, 0.9, 1.5)):
        term, r = ours(model, b, amp, **kw)
        sr, s, cos, ratio = compare(d0, ref_delta, ref_r, term.last_delta, r)
        where = f"{task}/{setting}/{'bf16' if amp else 'fp32'}"
        assert sr.all(), f"{where}: the reference leaves sequences {(~sr).nonzero().flatten().tolist()} in place"
        assert torch.equal(s, sr), (f"{where}: sequences stepping in the fp32 reference: {int(sr.sum())}/{len(sr)}; "
                                    f"here: {int(s.sum())}/{len(s)} (no step: {(sr & ~s).nonzero().flatten().tolist()})")
        assert (cos >= cos_min).all(), f"{where}: cosine of the adversarial step with the reference's, per sequence: {cos.tolist()}"
        assert 1 / ratio_tol <= ratio <= ratio_tol, f"{where}: R_s = {float(r.detach()):.4g}, reference {float(ref_r):.4g} (x{ratio:.3g})"
        assert term.last_delta.abs().max() <= kw["eps"] * (1 + 1e-6)

def test_smart_train_mode_bf16_step_matches_reference_with_replayed_dropout(model):
    "Train mode through `TrainStep.loss` under bf16: the term's forwards replay the step's dropout masks; the reference replays the same state"
    class Recorded(SmartTerm):
        def __call__(self, *a):
            self.r = super().__call__(*a); return self.r
    kw, b = SETTINGS["preset"], _batch("para", seed=2)
    model.train()
    try:
        term = Recorded(weight=1.0, iters=1, seed=SEED, **kw)
        st = TrainStep(model, model, opt=None, terms=[term], amp_dtype=torch.bfloat16, device=CPU)
        st.loss("para", b)                                               # saves the random state, bf16 forward, then the term
        d0, ref_delta, ref_r = reference(model, b, **kw, rng=st.ctx.rng[0])
        sr, s, cos, ratio = compare(d0, ref_delta, ref_r, term.last_delta, term.r)
        assert sr.all() and torch.equal(s, sr), (sr.tolist(), s.tolist())
        assert (cos >= 0.9).all(), cos.tolist()
        assert 1 / 1.5 <= ratio <= 1.5, (float(term.r.detach()), float(ref_r))
        # the test can tell: the reference's own algorithm with fresh dropout draws (no replay) fails these same criteria
        _, fresh_delta, fresh_r = reference(model, b, **kw)
        _, _, cos_fresh, ratio_fresh = compare(d0, ref_delta, ref_r, fresh_delta, fresh_r)
        assert (cos_fresh < 0.9).any() or not 1 / 1.5 <= ratio_fresh <= 1.5, (cos_fresh.tolist(), ratio_fresh)
    finally: model.eval()

def test_smart_iters0_perturbation_is_constant_noise(model):
    "Issue 26.6b: with iters=0 δ is the starting noise, a constant that does not require grad; R_s is still ℓ_s(f(x+δ₀), f(x)), differentiable in θ"
    model.eval(); kw = dict(SETTINGS["preset"], noise=1e-2)          # noise well inside the ball: R_s far from 0
    b = _batch("sst")
    term, r = ours(model, b, None, iters=0, **kw)
    assert not term.last_delta.requires_grad and term.last_delta.grad_fn is None
    d0, ref_delta, ref_r = reference(model, b, iters=0, **kw)
    assert torch.equal(term.last_delta, d0)
    assert abs(float(r.detach()) / float(ref_r) - 1) < 1e-3, (float(r.detach()), float(ref_r))
    assert r.requires_grad
    model.zero_grad(); r.backward()
    assert model.bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert term.last_delta.grad is None
    model.zero_grad()
