"Losses against torch.nn.functional, hand formulas and sentence-transformers (a test oracle only, never a runtime dependency)"
import math
import pytest, torch
import torch.nn.functional as F
from minbert_nb.losses import (sst_loss, para_loss, sts_loss, cosine_scores, cosine_loss, mnrl_loss, LOSSES, TASK_LOSSES,
                               get_loss)

@pytest.fixture
def g(): return torch.Generator().manual_seed(0)

def _finite_grads(*ts): return all(t.grad is not None and torch.isfinite(t.grad).all() for t in ts)

# ---- task losses -----------------------------------------------------------------------------------------------------
def test_sst_loss_matches_cross_entropy(g):
    z, y = torch.randn(8, 5, generator=g, requires_grad=True), torch.randint(0, 5, (8,), generator=g)
    loss = sst_loss(z, y)
    assert torch.allclose(loss, F.cross_entropy(z, y))
    assert torch.allclose(loss, -torch.log_softmax(z, -1)[torch.arange(8), y].mean())
    assert torch.allclose(sst_loss(z, y, label_smoothing=0.1), F.cross_entropy(z, y, label_smoothing=0.1))
    loss.backward(); assert _finite_grads(z)

def test_sst_loss_masked_and_errors(g):
    z, y = torch.randn(4, 5, generator=g), torch.tensor([1, 2, 3, 4])
    masked = torch.tensor([1, -100, 3, -100])
    assert torch.allclose(sst_loss(z, masked), F.cross_entropy(z[[0, 2]], y[[0, 2]]))
    assert torch.allclose(sst_loss(z, y[:, None]), sst_loss(z, y))
    with pytest.raises(ValueError, match="predictions but"): sst_loss(z, y[:2])
    with pytest.raises(ValueError, match=r"\(B, C\)"): sst_loss(z[None], y)
    with pytest.raises(ValueError, match="empty"): sst_loss(z[:0], y[:0])

def test_para_loss_matches_bce(g):
    z, y = torch.randn(9, generator=g, requires_grad=True), torch.randint(0, 2, (9,), generator=g)
    loss = para_loss(z, y)
    assert torch.allclose(loss, F.binary_cross_entropy_with_logits(z, y.float()))
    p = torch.sigmoid(z)
    assert torch.allclose(loss, -(y * p.log() + (1 - y) * (1 - p).log()).mean(), atol=1e-6)
    assert torch.allclose(para_loss(z[:, None], y), loss)                 # (B, 1) logits, no broadcasting
    assert torch.allclose(para_loss(z, y.float()[:, None]), loss)
    assert torch.allclose(para_loss(z, y, pos_weight=0.59),
                          F.binary_cross_entropy_with_logits(z, y.float(), pos_weight=torch.tensor(0.59)))
    loss.backward(); assert _finite_grads(z)
    big = torch.tensor([100.0, -100.0], requires_grad=True)              # stable at extreme logits
    l = para_loss(big, torch.tensor([0, 1])); l.backward()
    assert torch.isfinite(l) and l.item() == pytest.approx(100.0) and _finite_grads(big)
    with pytest.raises(ValueError, match=r"\(B,\) or \(B, 1\)"): para_loss(torch.randn(9, 2), y)

def test_sts_loss_matches_mse_and_refuses_broadcast(g):
    s, y = torch.randn(7, generator=g, requires_grad=True), torch.rand(7, generator=g) * 5
    loss = sts_loss(s, y)
    assert torch.allclose(loss, F.mse_loss(s, y))
    col = s[:, None]
    assert torch.allclose(sts_loss(col, y), loss)
    assert not torch.allclose((col - y).pow(2).mean(), loss)              # what F.mse_loss(col, y) would broadcast to
    assert torch.allclose(sts_loss(s, y.double()), loss)
    loss.backward(); assert _finite_grads(s)
    with pytest.raises(ValueError, match="7 predictions but 6"): sts_loss(s, y[:6])

# ---- cosine loss -----------------------------------------------------------------------------------------------------
def test_cosine_loss_seed_definition(g):
    u, v = torch.randn(6, 12, generator=g, requires_grad=True), torch.randn(6, 12, generator=g)
    s = torch.tensor([0.0, 0.8, 2.4, 3.0, 4.6, 5.0])
    cos = (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1))
    assert torch.allclose(cosine_scores(u, v), (cos + 1) * 5 / 2, atol=1e-6)       # Liu & Shen (000) mapping
    loss = cosine_loss(u, v, s)
    assert torch.allclose(loss, F.mse_loss((cos + 1) * 2.5, s), atol=1e-6)         # Lee & Li (002)
    assert torch.allclose(loss, 6.25 * F.mse_loss(cos, 2 * s / 5 - 1), atol=1e-6)  # label mapped to [-1, 1]
    loss.backward(); assert _finite_grads(u)
    assert torch.allclose(cosine_scores(u, 3 * u), torch.full((6,), 5.0))
    assert torch.allclose(cosine_scores(u, -u), torch.zeros(6), atol=1e-6)
    with pytest.raises(ValueError, match="min_cos"): cosine_scores(u, v, min_cos=1.0)
    with pytest.raises(ValueError, match="differ in shape"): cosine_loss(u, v[:3], s)

def test_cosine_loss_equals_sentence_transformers(g):
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss
    u, v = torch.randn(10, 16, generator=g), torch.randn(10, 16, generator=g)
    s = torch.rand(10, generator=g) * 5
    ref = CosineSimilarityLoss(model=None).compute_loss_from_embeddings([u, v], s / 5)
    assert torch.allclose(cosine_loss(u, v, s / 5, low=0, high=1, min_cos=0), ref, atol=1e-6)
    assert torch.allclose(cosine_loss(u, v, s, min_cos=0), 25 * ref, atol=1e-5)       # same, in label units

def test_cosine_loss_zero_vector_is_finite():
    u = torch.zeros(2, 4, requires_grad=True); v = torch.randn(2, 4, requires_grad=True)
    loss = cosine_loss(u, v, torch.tensor([2.5, 1.0])); loss.backward()
    assert torch.isfinite(loss) and _finite_grads(u, v)
    assert torch.allclose(cosine_scores(u, v), torch.full((2,), 2.5))              # cos taken as 0

# ---- MNRL ------------------------------------------------------------------------------------------------------------
def _mnrl_seed002(a, b, scale):
    "J = -1/K sum_i [S(a_i, b_i) - log sum_j exp S(a_i, b_j)], S = scale * cos"
    K = len(a); J = 0.0
    for i in range(K):
        S = [scale * torch.dot(a[i], b[j]) / (a[i].norm() * b[j].norm()) for j in range(K)]
        J += S[i] - math.log(sum(math.exp(x.item()) for x in S))
    return -J / K

@pytest.mark.parametrize("scale", [1.0, 10.0, 20.0, 40.0])
def test_mnrl_hand_and_sentence_transformers(g, scale):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    u, v = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    v = v + 2 * u                                                                     # some signal on the diagonal
    ours = mnrl_loss(u, v, scale=scale)
    assert ours.item() == pytest.approx(float(_mnrl_seed002(u, v, scale)), rel=1e-5, abs=1e-6)
    ref = MultipleNegativesRankingLoss(model=None, scale=scale).compute_loss_from_embeddings([u, v], None)
    assert torch.allclose(ours, ref, atol=1e-6)
    n = torch.randn(8, 16, generator=g)
    ref_n = MultipleNegativesRankingLoss(model=None, scale=scale).compute_loss_from_embeddings([u, v, n], None)
    assert torch.allclose(mnrl_loss(u, v, scale=scale, negatives=n), ref_n, atol=1e-6)

def test_mnrl_default_scale_and_matrix_form(g):
    u, v = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    S = 20.0 * F.normalize(u, dim=-1) @ F.normalize(v, dim=-1).T
    assert torch.allclose(mnrl_loss(u, v), F.cross_entropy(S, torch.arange(5)))
    assert torch.allclose(mnrl_loss(u, v), (torch.logsumexp(S, 1) - S.diag()).mean())

def test_mnrl_gradients_finite_and_training_reduces_loss(g):
    u = torch.randn(16, 8, generator=g, requires_grad=True); v = torch.randn(16, 8, generator=g, requires_grad=True)
    first = mnrl_loss(u, v); first.backward(); assert _finite_grads(u, v)
    opt = torch.optim.SGD([u, v], lr=0.5)
    for _ in range(50):
        opt.zero_grad(); l = mnrl_loss(u, v); l.backward(); opt.step()
    assert l.item() < 0.5 * first.item()

def test_mnrl_edge_cases(g):
    u = torch.randn(1, 8, generator=g, requires_grad=True); v = torch.randn(1, 8, generator=g, requires_grad=True)
    one = mnrl_loss(u, v); one.backward()                                            # batch of 1: nothing to rank
    assert one.item() == 0.0 and _finite_grads(u, v) and u.grad.abs().sum() == 0
    u, v = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    n = torch.randn(6, 8, generator=g)
    m = torch.tensor([True, False, True, True, False, False])
    assert torch.allclose(mnrl_loss(u, v, mask=m), mnrl_loss(u[m], v[m]))
    assert torch.allclose(mnrl_loss(u, v, negatives=n, mask=m.long()), mnrl_loss(u[m], v[m], negatives=n[m]))
    ur = u.clone().requires_grad_()
    none = mnrl_loss(ur, v, mask=torch.zeros(6, dtype=torch.bool)); none.backward()   # no positive pair in the batch
    assert none.item() == 0.0 and _finite_grads(ur)
    zero = torch.zeros(3, 8, requires_grad=True)                                     # degenerate embeddings stay finite
    l = mnrl_loss(zero, torch.randn(3, 8, generator=g)); l.backward()
    assert torch.isfinite(l) and _finite_grads(zero)
    with pytest.raises(ValueError, match="empty"): mnrl_loss(u[:0], v[:0])
    with pytest.raises(ValueError, match=r"\(B, D\)"): mnrl_loss(u, v[:3])
    with pytest.raises(ValueError, match="negatives"): mnrl_loss(u, v, negatives=n[:2])
    with pytest.raises(ValueError, match="mask has 3"): mnrl_loss(u, v, mask=m[:3])

# ---- registry --------------------------------------------------------------------------------------------------------
def test_registry():
    assert set(LOSSES) == {"cross_entropy", "bce", "mse", "cosine", "mnrl", "cosent"}
    assert get_loss("cosine") is cosine_loss and get_loss("mnrl") is mnrl_loss
    assert {t: get_loss(n) for t, n in TASK_LOSSES.items()} == dict(sst=sst_loss, para=para_loss, sts=sts_loss)
    with pytest.raises(ValueError, match=r"unknown loss 'ce'; valid names are \['bce', 'cosent', 'cosine', 'cross_entropy', 'mnrl', 'mse'\]"):
        get_loss("ce")
