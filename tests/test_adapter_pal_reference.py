"""Houlsby adapters (with per-task LayerNorms) and PALs against forwards written from their reference code, not from
minbert_nb's modules: google-research adapter-bert (`modeling.py`, `transformer_model`, `feedforward_adapter`) and
Stickland & Murray's Bert-n-Pals (`modeling.py`, `BERTPals`, `BERTLayer` with `mult=True`).

The reference forward below reads minbert_nb's weights by name and computes BERT with plain tensor operations, in the
reference's order: for adapters dense -> dropout -> adapter -> LayerNorm(. + residual), each task with its own LayerNorms;
for PALs extra = gelu(V^D g(V^E h)) with g a 6-head attention, added to the feed-forward block's residual. It runs in
training mode with the very dropout masks minbert_nb drew (recorded from `F.dropout` in call order, replayed here) and in
evaluation mode, in float32 and under bf16 autocast; outputs and every parameter's gradient are compared.

Activations: the reference code (TensorFlow BERT) writes GELU with its tanh approximation; minbert_nb and PyTorch BERT use the
exact erf form, and so does this reference forward (a documented departure of every PyTorch port, not of the method)."""
import contextlib, math
import pytest, torch
import torch.nn.functional as F
from minbert_nb.core import set_seed
from minbert_nb.pretrained import load_bert, load_tokenizer, tokenize
from minbert_nb.bert import set_attn_implementation
from minbert_nb.peft import PeftConfig, inject_peft

SENTS = ["A man is playing a guitar on a small stage.", "Stocks fell sharply today.", "Hi", "The cat sat on the mat, quietly."]
TASKS = ("sst", "para", "sts")


class DropoutMasks:
    "Record the masks of every `F.dropout` call of a forward (in call order), then hand them out again in the same order"
    def __init__(self, seed:int=0): self.g, self.masks = torch.Generator().manual_seed(seed), []

    @contextlib.contextmanager
    def record(self):
        orig = F.dropout
        def dropout(x, p=0.5, training=True, inplace=False):
            if not training or p == 0: return x
            m = (torch.rand(x.shape, generator=self.g) >= p).to(x.dtype) / (1 - p)
            self.masks.append(m); return x * m
        F.dropout = dropout
        try: yield self
        finally: F.dropout = orig

    def replayer(self):
        it = iter(self.masks)
        def drop(x):
            m = next(it)
            assert m.shape == x.shape, f"dropout sites out of order: mask {tuple(m.shape)} for input {tuple(x.shape)}"
            return x * m
        drop.left = lambda: sum(1 for _ in it)
        return drop


def _lin(W, x, name): return F.linear(x, W[name + ".weight"], W[name + ".bias"])

def _gelu(x): return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))

def _ln(W, x, name, task, per_task:bool):
    n = f"{name}.layernorm_by_task.{task}" if per_task else name
    return F.layer_norm(x, x.shape[-1:], W[n + ".weight"], W[n + ".bias"], 1e-12)

def _attention(W, x, name, heads, ext_mask, drop, train):
    "BERT self-attention without output projection (Bert-n-Pals `BERTSelfAttention`): softmax(QK^T/sqrt(d) + mask), dropout, times V"
    B, T, C = x.shape; hs = C // heads
    split = lambda t: t.view(B, T, heads, hs).permute(0, 2, 1, 3)
    q, k, v = (split(_lin(W, x, f"{name}.{p}")) for p in ("query", "key", "value"))
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hs) + ext_mask, dim=-1)
    if train: probs = drop(probs)
    return (probs @ v).permute(0, 2, 1, 3).reshape(B, T, C)

def _adapter(W, h, name):
    "adapter-bert `feedforward_adapter`: h + up(gelu(down(h)))"
    return h + _lin(W, _gelu(_lin(W, h, name + ".down")), name + ".up")

def reference_forward(W, enc, task, methods, n_layers, n_heads, pal_heads=6, per_task_ln=True, drop=None, train=False):
    "The last hidden state (B, T, C), from the weights `W` (name -> tensor) alone"
    ids, tt, am = enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]
    d = drop if train else (lambda x: x)
    ad, pal = "adapter" in methods, "pal" in methods
    lnt = per_task_ln and ad
    x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][: ids.shape[1]][None] \
        + W["embeddings.token_type_embeddings.weight"][tt]
    x = d(_ln(W, x, "embeddings.LayerNorm", task, lnt))
    ext = (1.0 - am[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
    for i in range(n_layers):
        p = f"encoder.layer.{i}"
        dense = lambda h, n: _lin(W, h, n + (".base_layer" if ad else ""))
        ctx = _attention(W, x, f"{p}.attention.self", n_heads, ext, d, train)
        a = d(dense(ctx, f"{p}.attention.output.dense"))                                  # dense, dropout ...
        if ad: a = _adapter(W, a, f"{p}.attention.output.dense.adapter_by_task.{task}")   # ... adapter ...
        a = _ln(W, a + x, f"{p}.attention.output.LayerNorm", task, lnt)                    # ... LayerNorm(. + residual)
        extra = 0
        if pal:   # BERTPals: gelu(aug_dense2(attn(aug_dense(h)))), h = the layer's input; 6 heads
            z = _lin(W, x, f"pal_shared.pal_encoder.{task}")
            z = _attention(W, z, f"{p}.parallel.pal_attention.{task}", pal_heads, ext, d, train)
            extra = _gelu(_lin(W, z, f"pal_shared.pal_decoder.{task}"))
        o = d(dense(_gelu(_lin(W, a, f"{p}.intermediate.dense")), f"{p}.output.dense"))
        if ad: o = _adapter(W, o, f"{p}.output.dense.adapter_by_task.{task}")
        x = _ln(W, o + a + extra, f"{p}.output.LayerNorm", task, lnt)                     # BERTLayer(mult): output(inter, attn + extra)
    return x


@pytest.fixture(scope="module")
def enc(): return tokenize(load_tokenizer(), SENTS)


def _model(methods, **kw):
    set_seed(0)
    bert = load_bert()
    inject_peft(bert, PeftConfig(peft=methods, **kw), TASKS)
    with torch.no_grad():   # every module away from its identity start, so each one's place matters
        for n, p in bert.named_parameters():
            if any(s in n for s in ("adapter_by_task", "pal_")): p.normal_(0, 0.05)
            if "layernorm_by_task" in n: p.add_(torch.randn_like(p) * 0.1)
    return bert


CASES = [("adapter", {}), ("adapter", dict(adapter_layernorm="shared")), ("pal", {}), ("adapter,pal", {})]
IDS = ["adapter", "adapter-shared-ln", "pal", "adapter+pal"]


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("methods,kw", CASES, ids=IDS)
def test_equals_the_reference_in_training_and_evaluation(enc, methods, kw, amp):
    bert = _model(methods, **kw)
    cfg = bert.config; per_task = kw.get("adapter_layernorm", "task") == "task"
    ac = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp)
    tol = dict(fp32=(2e-5, 1e-5), bf16=(6e-2, 4e-2))["bf16" if amp else "fp32"]   # (outputs: max abs; all gradients: relative norm)
    real = enc["attention_mask"].bool()
    # evaluation, on the packed path minbert_nb takes on CPU with padding
    bert.eval()
    W = {n: p.detach() for n, p in bert.named_parameters()}
    for task in TASKS:
        with torch.no_grad(), ac():
            ours = bert(**enc, task=task).last_hidden_state.float()[real]
            ref = reference_forward(W, enc, task, methods, cfg.num_hidden_layers, cfg.num_attention_heads, per_task_ln=per_task).float()[real]
        assert (ours - ref).abs().max().item() <= tol[0], f"eval {task}: {(ours - ref).abs().max().item():.2e}"
    # training: the same dropout masks (eager attention, so the attention-probability dropout is a mask too), outputs and gradients
    set_attn_implementation(bert, "eager"); bert.unpad = False; bert.train()
    torch.manual_seed(1); R = torch.randn(len(SENTS), enc["input_ids"].shape[1], cfg.hidden_size)
    for task in ("sst", "sts"):
        masks = DropoutMasks(seed=7)
        bert.zero_grad(set_to_none=True)
        with masks.record(), ac(): ours = bert(**enc, task=task).last_hidden_state
        (ours.float()[real] * R[real]).sum().backward()
        g_ours = {n: p.grad for n, p in bert.named_parameters() if p.grad is not None}
        Wg = {n: p.detach().clone().requires_grad_(p.requires_grad) for n, p in bert.named_parameters()}
        drop = masks.replayer()
        with ac(): ref = reference_forward(Wg, enc, task, methods, cfg.num_hidden_layers, cfg.num_attention_heads, per_task_ln=per_task,
                                           drop=drop, train=True)
        assert drop.left() == 0, "minbert_nb drew more dropout masks than the reference applies"
        (ref.float()[real] * R[real]).sum().backward()
        with torch.no_grad(), ac():
            bert.eval(); evald = bert(**enc, task=task).last_hidden_state.float()[real]; bert.train()
        assert (ours.float()[real] - evald).abs().max() > 0.1                      # dropout acted: a misplaced one would show
        diff = (ours.float()[real] - ref.float()[real]).abs().max().item()
        assert diff <= tol[0], f"train {task}: outputs differ by {diff:.2e}"
        g_ref = {n: t.grad for n, t in Wg.items() if t.grad is not None}
        assert set(g_ours) == set(g_ref), set(g_ours) ^ set(g_ref)
        assert any("adapter_by_task" in n or "pal_" in n for n in g_ours)
        if per_task and "adapter" in methods:   # the task's own LayerNorms learn, the other tasks' do not, the backbone's are unused
            assert any(f"layernorm_by_task.{task}." in n for n in g_ours) and not any("layernorm_by_task.para." in n for n in g_ours)
        names = [n for n in g_ours if not n.endswith("key.bias")]   # key biases: 0 in exact arithmetic (softmax ignores a shift
        go = torch.cat([g_ours[n].float().flatten() for n in names])  # shared by all keys), rounding noise in both
        gr = torch.cat([g_ref[n].float().flatten() for n in names])
        rel = ((go - gr).norm() / gr.norm()).item()
        print(f"{methods} {kw} amp={amp} {task}: out {diff:.2e} grads {rel:.2e}")
        assert rel <= tol[1], f"train {task}: the gradients differ by {rel:.2e} (relative norm)"
        if not amp:   # fp32: every parameter's own gradient, relative to its largest entry
            gmax = gr.abs().max().item()
            for n in names:
                err = (g_ours[n] - g_ref[n]).abs().max().item() / max(g_ref[n].abs().max().item(), 1e-3 * gmax)
                assert err <= 1e-3, f"train {task}: gradient of {n} differs by {err:.2e} of its max"

def test_pal_uses_six_heads_and_gelu_by_default():
    bert = _model("pal")
    g = bert.encoder.layer[0].parallel.pal_attention["sst"]
    assert (g.num_heads, g.head_dim) == (6, 34)
    assert sum(p.numel() for n, p in bert.named_parameters() if "pal_" in n) == 3 * (2 * 384 * 204 + 204 + 384) + 3 * 6 * 3 * (204 * 204 + 204)
