"""LoRA, DoRA and prefix tuning against their reference library (issue 26): each test builds the same model in Hugging Face
`peft` on transformers' `BertModel` from the same checkpoint, copies the weights (random non-zero LoRA A and B, DoRA magnitudes,
prefix keys and values or the prefix MLP), and compares outputs at the real tokens, in eval mode and in train mode with the
same dropout masks, and in train mode also the gradients of the PEFT parameters and of the word embeddings (through a fixed
linear probe on top), under fp32 and under bf16 autocast.

Sharing the dropout masks: `DropoutTape` takes the place of `torch.nn.functional.dropout`, which every dropout of both models
goes through (`nn.Dropout.forward` calls `F.dropout`, and so do peft's `lora_dropout` and transformers' eager attention on the
attention probabilities). The reference's forward runs first and records one Bernoulli mask per call, in call order; ours
replays them in the same order, each checked for its shape, and must use all of them (the number is checked too). Both
attentions run 'eager' in train mode: PyTorch's fused `scaled_dot_product_attention` draws its dropout mask inside the
kernel, where it cannot be shared (in eval mode ours is compared with SDPA as well). minBERT runs its token-wise layers on
the real tokens only (on CPU, `BertModel.unpad`): there the reference's (B, T, X) mask is replayed at the real tokens' rows
(N, X), the same mask. Every train-mode check also asserts that dropout changed the output, so a dropout at the wrong place
would show.

Tolerances. fp32: the two models compute the same function in a different order (minBERT's fused q/k/v projection, DoRA's
terms, the prefix concatenation), so they agree to float32 rounding: max abs difference <= 1e-5 of the largest entry
(outputs: of max(1, largest entry)); measured 3e-7..4.1e-6. bf16: both run under `torch.autocast('cpu', bfloat16)`, where every
matmul rounds its result to 8 significant bits (relative step 2**-8 = 0.4%), and the two models round at different places
(e.g. minBERT's attention scores and softmax are bf16, transformers' are promoted to fp32 by its fp32 mask). Two correct bf16
implementations then differ by about as much as either differs from fp32, so the bound is that noise floor, measured on the
spot with the same masks: relative Frobenius difference (whole tensor; a max over entries is too noisy in bf16) of bf16-ours
vs bf16-peft <= 2 x max(ours bf16 vs ours fp32, peft bf16 vs peft fp32) + 1e-3. Measured: about 1x the floor (0.3-2% of the
norm). Each check was shown to fail on a broken scratch copy (LoRA dropout on the branch output, no alpha/r scaling, DoRA's
pre-fix dropout, prefix keys and values swapped or shifted by a layer, hidden dropout after the residual): in fp32 and bf16
alike. Only DoRA's detached norm is a gradient change of the size of bf16 noise: the fp32 test is the one that sees it.
"""
import contextlib, inspect, math, textwrap
import pytest, torch
import transformers
from minbert_nb.core import set_seed
from minbert_nb.bert import set_attn_implementation, mask_packing, PACK_MULTIPLE
from minbert_nb.pretrained import load_bert, load_tokenizer, tokenize, embedded_backbone_path
from minbert_nb.lora import LoRALinear, inject_lora
from minbert_nb.prefix import inject_prefix

peft = pytest.importorskip("peft")
from peft import LoraConfig, PrefixTuningConfig, TaskType, get_peft_model

SENTS = ["A man is playing a guitar.", "Someone plays an instrument on a small stage tonight.", "Stocks fell.", "Hi"]
P, R, ALPHA, LORA_P = 4, 8, 16, 0.3       # prefix length; LoRA rank, alpha (scaling 2) and dropout (high: masks matter)
LAYERS = 6


@pytest.fixture(scope="module")
def batch():
    b = tokenize(load_tokenizer(), SENTS)
    assert (b["attention_mask"] == 0).any() and (b["token_type_ids"] == 0).all()   # padded; single sentences (peft drops token types)
    return b


class DropoutTape:
    """Stands in for `F.dropout`: in `record` mode it draws a mask per call and keeps it; in `replay` mode it applies the kept
    masks in the same order, each checked for its shape (a (B, T, X) mask goes to a packed (N, X) input at the positions
    our packing runs on: the real tokens, then the padding positions that round their count up)"""
    def __init__(self, real_idx:torch.Tensor, seed:int=0):
        self.masks, self.mode, self.i, self.idx, self.packed = [], None, 0, real_idx, 0
        self.g = torch.Generator().manual_seed(seed)

    def __call__(self, input, p=0.5, training=True, inplace=False):
        if not training or p == 0: return input
        if self.mode == "record": m = torch.rand(input.shape, generator=self.g) >= p; self.masks.append(m)
        elif self.mode == "replay":
            assert self.i < len(self.masks), "more dropout calls than in the reference forward"
            m = self.masks[self.i]; self.i += 1
            if m.shape != input.shape:
                assert m.dim() == 3 and input.shape == (len(self.idx), m.shape[-1]), (m.shape, input.shape)
                m = m.reshape(-1, m.shape[-1])[self.idx]; self.packed += 1
        else: raise AssertionError("dropout called outside record/replay")
        return input * m.to(input.dtype) / (1 - p)

    @contextlib.contextmanager
    def run(self, monkeypatch):
        "Record on the first use, replay on every later one; all masks must be used"
        self.mode, self.i = ("replay" if self.masks else "record"), 0
        with monkeypatch.context() as mp:
            mp.setattr(torch.nn.functional, "dropout", self)
            yield self
        if self.mode == "replay": assert self.i == len(self.masks), f"{self.i} dropout calls, the reference made {len(self.masks)}"
        self.mode = None


def _autocast(dtype): return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()


def _hf(**kw):
    return transformers.BertModel.from_pretrained(str(embedded_backbone_path()), add_pooling_layer=False, attn_implementation="eager", **kw)


def _ours():
    m = load_bert()
    set_attn_implementation(m, "eager")     # a shareable attention-dropout mask (SDPA draws its own inside the kernel)
    return m


def _train_only(model, params):
    "Freeze all of `model` but `params` (pretrain mode); peft had frozen its base model already"
    keep = {id(p) for p in params}
    for p in model.parameters(): p.requires_grad_(id(p) in keep)


PROBE = torch.randn(384, 3, generator=torch.Generator().manual_seed(1)) / math.sqrt(384)   # a fixed head-like linear probe

def _forward(model, batch, ours:bool, task=None, positions=None):
    "Hidden states at the real tokens (N, C), in fp32"
    m = batch["attention_mask"]
    if ours: h = model(batch["input_ids"], m, batch["token_type_ids"], task=task).last_hidden_state
    else: h = model(input_ids=batch["input_ids"], attention_mask=m, **({} if positions is None else dict(position_ids=positions))).last_hidden_state
    return h[m.bool()].float()


def _step(model, batch, ours:bool, params:dict, dtype:str, tape, monkeypatch, **kw):
    """Train-mode forward with the tape's masks, probe loss, backward: (outputs, {name: grad}). `params` maps a name to
    (parameter, function that puts its gradient in our layout, or None)"""
    model.train()
    for p, _ in params.values(): p.grad = None
    with tape.run(monkeypatch), _autocast(dtype):
        h = _forward(model, batch, ours, **kw)
        loss = (h @ PROBE).tanh().sum()
    loss.backward()
    return h.detach(), {n: (f(p.grad) if f else p.grad).detach().clone() for n, (p, f) in params.items()}


@torch.no_grad()
def _eval(model, batch, ours, dtype, **kw):
    model.eval()
    with _autocast(dtype): return _forward(model, batch, ours, **kw)


def _maxrel(a, b): return (a - b).abs().max().item() / max(1.0, b.abs().max().item())   # max abs diff / largest entry (>= 1)
def _frob(a, b): return ((a - b).norm() / b.norm()).item()                                 # relative Frobenius difference


def _compare(what, o, r, dtype, floor=None):
    """fp32: max abs difference <= 1e-5 of the largest entry (outputs: of max(1, largest)). bf16: relative Frobenius difference
    <= 2 x the bf16 noise floor (the larger of ours and peft's own bf16-vs-fp32 difference, same masks) + 1e-3"""
    if dtype == "fp32": d, tol = _maxrel(o, r), 1e-5
    else: d, tol = _frob(o, r), 2 * floor + 1e-3
    assert d <= tol, f"{what} ({dtype}): {d:.3e} > {tol:.2e}"
    return d


def _check(ours, ref, batch, monkeypatch, o_params, r_params, dtype, o_kw={}, r_kw={}):
    "Eval outputs; train outputs and gradients with the same masks. Returns the measured differences (and floors under bf16)"
    res = {}
    yo, yr = _eval(ours, batch, True, dtype, **o_kw), _eval(ref, batch, False, dtype, **r_kw)
    ef = dtype == "bf16" and max(_frob(yo, _eval(ours, batch, True, "fp32", **o_kw)), _frob(yr, _eval(ref, batch, False, "fp32", **r_kw)))
    res["eval"] = _compare("eval outputs", yo, yr, dtype, ef)
    set_attn_implementation(ours, "sdpa")                # our default attention kernel gives the same in eval mode
    res["eval_sdpa"] = _compare("eval outputs, SDPA", _eval(ours, batch, True, dtype, **o_kw), yr, dtype, ef)
    set_attn_implementation(ours, "eager")
    tape = DropoutTape(mask_packing(batch["attention_mask"], PACK_MULTIPLE)[0].idx)   # the rows our packing runs on
    hr, gr = _step(ref, batch, False, r_params, dtype, tape, monkeypatch, **r_kw)
    ho, go = _step(ours, batch, True, o_params, dtype, tape, monkeypatch, **o_kw)
    res["masks"] = len(tape.masks)
    assert tape.packed > 0       # ours ran on the real tokens only (CPU's packed path), with the reference's masks at those rows
    assert _maxrel(ho, _eval(ours, batch, True, dtype, **o_kw)) > 0.05, "dropout did not change our output"
    fl = {}
    if dtype == "bf16":   # the noise floor: each model in bf16 against itself in fp32, with the same masks
        ho32, go32 = _step(ours, batch, True, o_params, "fp32", tape, monkeypatch, **o_kw)
        hr32, gr32 = _step(ref, batch, False, r_params, "fp32", tape, monkeypatch, **r_kw)
        fl = {n: max(_frob(go[n], go32[n]), _frob(gr[n], gr32[n])) for n in go}
        fl["out"] = max(_frob(ho, ho32), _frob(hr, hr32))
        res["floor"] = dict(eval=ef, train=fl["out"], grads=max(fl[n] for n in go))
    res["train"] = _compare("train outputs", ho, hr, dtype, fl.get("out"))
    res["grads"] = max(_compare(f"grad {n}", go[n], gr[n], dtype, fl.get(n)) for n in go)
    for n in go: assert go[n].abs().max() > 0, f"no gradient reached {n}"
    return res


# ---------------------------------------------------------------- LoRA and DoRA

def _lora_pair(dora:bool):
    "minBERT and peft with LoRA (DoRA) on query and value, the same random non-zero A, B (and magnitudes); word embeddings train too"
    set_seed(0)
    hfp = get_peft_model(_hf(), LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["query", "value"], lora_dropout=LORA_P, use_dora=dora))
    ours = _ours()
    inject_lora(ours, ["query", "value"], r=R, alpha=ALPHA, dropout=LORA_P, dora=dora)
    o_params, r_params = {}, {}
    for i in range(LAYERS):
        for p in ("query", "value"):
            h, o = getattr(hfp.get_base_model().encoder.layer[i].attention.self, p), getattr(ours.encoder.layer[i].attention.self, p)
            pairs = {"A": (h.lora_A["default"].weight, o.lora_A.weight), "B": (h.lora_B["default"].weight, o.lora_B.weight)}
            if dora: pairs["m"] = (h.lora_magnitude_vector["default"].weight, o.lora_magnitude)
            with torch.no_grad():
                for k, (a, b) in pairs.items():
                    if k == "m": a.mul_(torch.rand_like(a) + 0.5)      # peft's init is the base weight's row norm, as ours
                    else: a.normal_(0, 0.05)
                    b.copy_(a)
            for k, (a, b) in pairs.items(): r_params[f"{i}.{p}.{k}"], o_params[f"{i}.{p}.{k}"] = (a, None), (b, None)
    # the word embeddings' gradient checks the backward through the whole backbone
    r_params["word_embeddings"] = (hfp.get_base_model().embeddings.word_embeddings.weight, None)
    o_params["word_embeddings"] = (ours.embeddings.word_embeddings.weight, None)
    _train_only(ours, [p for p, _ in o_params.values()]); _train_only(hfp, [p for p, _ in r_params.values()])
    return ours, hfp, o_params, r_params


@contextlib.contextmanager
def _peft_dora_norm_in_graph(monkeypatch):
    """peft's `DoraLinearLayer.forward` with its two `.detach()` of the weight norm removed: minBERT keeps the norm in the graph
    on purpose (the exact gradient of DoRA's formula; 05a_lora). The rest is peft's own code, recompiled from its source"""
    from peft.tuners.lora import dora
    src = textwrap.dedent(inspect.getsource(dora.DoraLinearLayer.forward))
    for a, b in {"lora_weight=lora_weight.detach()": "lora_weight=lora_weight", "weight_norm = weight_norm.detach()": "pass"}.items():
        assert src.count(a) == 1, f"peft's DoRA forward has changed: {a!r} is not there once"
        src = src.replace(a, b)
    ns = {}
    exec(compile(src, dora.__file__, "exec"), dora.__dict__, ns)
    with monkeypatch.context() as mp:
        mp.setattr(dora.DoraLinearLayer, "forward", ns["forward"])
        yield


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("dora", [False, True], ids=["lora", "dora"])
def test_lora_dora_equal_peft_eval_and_train(batch, monkeypatch, dora, dtype):
    ours, hfp, o_params, r_params = _lora_pair(dora)
    with (_peft_dora_norm_in_graph(monkeypatch) if dora else contextlib.nullcontext()):
        res = _check(ours, hfp, batch, monkeypatch, o_params, r_params, dtype)
    print(f"{'DoRA' if dora else 'LoRA'} {dtype}: {res}")
    assert res["masks"] == 1 + LAYERS * (1 + 2 + 2)   # embeddings; per layer: attention probs, two hidden, LoRA on query and value
    assert _maxrel(_eval(ours, batch, True, "fp32"), _eval(_hf(), batch, False, "fp32")) > 0.05   # the adapters change the output


def test_dora_detached_norm_is_the_only_gradient_difference(batch, monkeypatch):
    """Unmodified peft detaches DoRA's weight norm (DoRA paper sec. 4.3); minBERT does not. Outputs and the magnitudes'
    gradients are the same either way; A and B get different gradients, and ours with the norm detached gets peft's"""
    ours, hfp, o_params, r_params = _lora_pair(True)
    tape = DropoutTape(mask_packing(batch["attention_mask"], PACK_MULTIPLE)[0].idx)   # the rows our packing runs on
    hr, gr = _step(hfp, batch, False, r_params, "fp32", tape, monkeypatch)
    ho, go = _step(ours, batch, True, o_params, "fp32", tape, monkeypatch)
    assert _maxrel(ho, hr) <= 1e-5
    ab = max(_maxrel(go[n], gr[n]) for n in go if n[-1] in "AB")
    print(f"DoRA, norm in the graph vs peft's detached norm: A/B gradients differ by {ab:.2e} of their largest entry")
    assert ab > 1e-2 and max(_maxrel(go[n], gr[n]) for n in go if n[-1] not in "AB") <= 1e-5
    with monkeypatch.context() as mp:   # a test-only patch of ours: the norm detached gives peft's gradients
        mp.setattr(LoRALinear, "row_norm", staticmethod(lambda w: w.norm(p=2, dim=1).detach()))
        ho, go = _step(ours, batch, True, o_params, "fp32", tape, monkeypatch)
    assert max(_maxrel(go[n], gr[n]) for n in go) <= 1e-5


# ---------------------------------------------------------------- prefix tuning

def _prefix_pair(mlp:bool, tasks=("sst", "sts"), hidden:int=32):
    """Ours: per-task prefixes. peft: one PREFIX_TUNING adapter per task on the same BertModel (`set_adapter` picks one).
    peft's prefix `embedding.weight` (P, L*2*C) is read as (P, L, 2, nh, hs): layer l's keys at [:, l, 0], values at [:, l, 1]
    (`get_prompt`: view (B, P, 2L, nh, hs), permute to (2L, B, nh, P, hs), split in pairs); ours is (L, 2, nh, P, hs).
    With the MLP both are embedding (P, C) -> Linear(C, hidden) -> Tanh -> Linear(hidden, L*2*C), same output layout"""
    set_seed(0)
    ours = _ours()
    pre = inject_prefix(ours, list(tasks), length=P, mlp=mlp, mlp_hidden=hidden)
    cfg = lambda: PrefixTuningConfig(task_type=TaskType.FEATURE_EXTRACTION, num_virtual_tokens=P, prefix_projection=mlp,
                                     encoder_hidden_size=hidden)
    hfp = get_peft_model(_hf(), cfg(), adapter_name=tasks[0])
    for t in tasks[1:]: hfp.add_adapter(t, cfg())
    o_params, r_params = {}, {}
    nh, hs = ours.config.num_attention_heads, ours.config.head_dim
    to_ours = lambda g: g.view(P, LAYERS, 2, nh, hs).permute(1, 2, 3, 0, 4)     # peft's (P, L*2*C) -> ours (L, 2, nh, P, hs)
    for t in tasks:
        enc = hfp.prompt_encoder[t]
        with torch.no_grad():
            if mlp:
                pairs = {"emb": (enc.embedding.weight, pre.prefix_embedding[t]),
                         "l1.w": (enc.transform[0].weight, pre.prefix_mlp[t][0].weight), "l1.b": (enc.transform[0].bias, pre.prefix_mlp[t][0].bias),
                         "l2.w": (enc.transform[2].weight, pre.prefix_mlp[t][2].weight), "l2.b": (enc.transform[2].bias, pre.prefix_mlp[t][2].bias)}
                std = {"emb": 1.0, "l1.w": 1 / math.sqrt(ours.config.hidden_size), "l2.w": 2 / math.sqrt(hidden)}  # keys of about a real key's size
                for k, (a, b) in pairs.items(): a.normal_(0, std.get(k, 0.1)); b.copy_(a)
                for k, (a, b) in pairs.items(): r_params[f"{t}.{k}"], o_params[f"{t}.{k}"] = (a, None), (b, None)
            else:
                kv = torch.randn(LAYERS, 2, nh, P, hs)                                       # (L, 2, nh, P, hs), about a real key's size
                pre.prefix_kv[t].copy_(kv)
                enc.embedding.weight.copy_(kv.permute(3, 0, 1, 2, 4).reshape(P, -1))          # (P, L*2*C)
                r_params[f"{t}.kv"], o_params[f"{t}.kv"] = (enc.embedding.weight, to_ours), (pre.prefix_kv[t], None)
    r_params["word_embeddings"] = (hfp.get_base_model().embeddings.word_embeddings.weight, None)
    o_params["word_embeddings"] = (ours.embeddings.word_embeddings.weight, None)
    _train_only(ours, [p for p, _ in o_params.values()]); _train_only(hfp, [p for p, _ in r_params.values()])
    return ours, hfp, o_params, r_params


def _positions(batch):
    """The sentence at positions 0..T-1, as in minBERT. transformers would start it at the cache length P, and peft adds P to
    explicit `position_ids` (`_adjust_prompt_learning_kwargs`), so we pass arange(T) - P"""
    return torch.arange(batch["input_ids"].shape[1])[None] - P


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("mlp", [False, True], ids=["prefix", "prefix_mlp"])
def test_prefix_equals_peft_eval_and_train(batch, monkeypatch, mlp, dtype):
    ours, hfp, o_params, r_params = _prefix_pair(mlp)
    for task in ("sst", "sts"):
        hfp.set_adapter(task)
        for p, _ in o_params.values(): p.grad = None
        pick = lambda ps: {n: v for n, v in ps.items() if n.startswith(task + ".") or n == "word_embeddings"}
        res = _check(ours, hfp, batch, monkeypatch, pick(o_params), pick(r_params), dtype, o_kw=dict(task=task),
                     r_kw=dict(positions=_positions(batch)))
        print(f"prefix{' + MLP' if mlp else ''} {task} {dtype}: {res}")
        assert res["masks"] == 1 + LAYERS * 3                                             # no dropout in the prefix path
        assert all(p.grad is None for n, (p, _) in o_params.items() if n not in pick(o_params))   # the other task's prefixes: untouched
        hfp.set_adapter(task); _train_only(hfp, [p for p, _ in r_params.values()])           # (set_adapter re-freezes the others)


def test_prefix_positions_are_a_deliberate_departure(batch):
    """With peft's own positions (the sentence shifted to P..P+T-1) the outputs differ from minBERT's, which keeps the pretrained
    positions 0..T-1 of the sentence; with explicit positions 0..T-1 they agree"""
    ours, hfp, _, _ = _prefix_pair(False)
    hfp.set_adapter("sts")
    yo = _eval(ours, batch, True, "fp32", task="sts")
    shifted, aligned = _eval(hfp, batch, False, "fp32"), _eval(hfp, batch, False, "fp32", positions=_positions(batch))
    print(f"prefix, ours vs peft: {_maxrel(yo, aligned):.1e} with positions 0..T-1, {_maxrel(yo, shifted):.2f} with peft's shifted ones")
    assert _maxrel(yo, aligned) <= 1e-5 and _maxrel(yo, shifted) > 1e-2
