"""The static step (08j_static_step) against the eager one: the same weights in a whole run (fp32, every padded batch),
close in bf16; a run stopped half way resumes to the same weights; no operation in a step reads the device on the host,
for the plain model and every PEFT method; what cannot run static trains eagerly and says why"""
import json
import pytest, torch
from minbert_nb.config import preset_config
from minbert_nb.core import set_seed
from minbert_nb.multitask import MultitaskBert, fake_batch
from minbert_nb.optimizer import AdamW, param_groups, make_scheduler
from minbert_nb.step import TrainStep
from minbert_nb.static_step import StaticStep, HostSyncs, bound_batch, static_lengths
from minbert_nb.train import train
from minbert_nb.checkpoint import load_checkpoint, TrainingInterrupted
from datapaths import tiny_backbone_dir, SAMPLE, run_command

NO_DROPOUT = ["--hidden_dropout", "0", "--attention_dropout", "0", "--head_dropout", "0"]

def _args(out, *extra):
    return ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--data_dir", str(SAMPLE), "--steps_per_epoch", "6", "--epochs", "2",
            "--batch_size", "4", "--train_limit", "18", "--dev_limit", "8", "--eval_batch_size", "8", "--sst_phrases", "false",
            "--amp", "off", "--device", "cpu", "--checkpoint_every", "0", "--out", str(out), *extra]

def _weights(run): return load_checkpoint(run / "last.pt")["model"]

CONTRASTIVE = ["--contrastive_weight", "1", "--contrastive_batch", "8", "--contrastive_every", "2"]

@pytest.mark.parametrize("extra", [[], CONTRASTIVE], ids=["tasks", "contrastive"])
def test_a_static_run_trains_the_eager_runs_weights(tmp_path, extra):
    """Two epochs of 6 steps over 18 rows per task in batches of 4 (each pass ends with a batch of 2: padded to 4 rows and
    left out of the loss), no dropout: the eager run's losses, weights and dev scores. With contrastive batches every
    other step (MNRL, in-batch negatives), their padding pairs are no one's negatives"""
    from minbert_nb.commands import minbert_train
    r0 = run_command(minbert_train, *_args(tmp_path / "eager", *NO_DROPOUT, *extra))
    r1 = run_command(minbert_train, *_args(tmp_path / "static", *NO_DROPOUT, *extra, "--static_step", "true"))
    assert r0.returncode == r1.returncode == 0, r1.stdout[-2000:] + r1.stderr[-2000:]
    assert "static step: lengths [16, 32, 48, 64] x 4 rows, the epoch's batches on the device; run eagerly on cpu" in r1.stdout
    a, b = _weights(tmp_path / "eager"), _weights(tmp_path / "static")
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst < 1e-5, worst
    m0, m1 = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("eager", "static"))
    assert abs(m0["overall"] - m1["overall"]) < 1e-4, (m0["overall"], m1["overall"])
    assert m1["static_step"] == dict(on=True, fallback=None, lengths=[16, 32, 48, 64], rows=4, cuda_graphs=False, eager_steps=12,
                                     graph_steps=0, captures=0, syncs=[]) and m0["static_step"] is None
    import pandas as pd
    h0, h1 = (pd.read_csv(tmp_path / d / "history.csv") for d in ("eager", "static"))
    assert (h0.train_loss - h1.train_loss).abs().max() < 1e-5, (h0.train_loss, h1.train_loss)

def test_a_stopped_static_run_resumes_to_the_same_weights(tmp_path):
    "Dropout on: asked to stop at step 3 of epoch 2 (the checkpoint comes after step 4), resumed: the weights of the run not stopped"
    from minbert_nb.config import config_from_args
    full = config_from_args(_args(tmp_path / "full", "--static_step", "true"))
    train(full, progress=False)
    cut = config_from_args(_args(tmp_path / "cut", "--static_step", "true"))
    with pytest.raises(TrainingInterrupted): train(cut, progress=False, on_step=lambda info: info["epoch"] == 2 and info["i"] == 3)
    assert load_checkpoint(tmp_path / "cut" / "last.pt")["progress"]["i"] == 4
    train(config_from_args(["--resume", str(tmp_path / "cut")]), progress=False, resume=True)
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "cut")
    assert all(torch.equal(a[k], b[k]) for k in a)

def test_what_cannot_run_static_trains_eagerly_and_says_why(tmp_path):
    from minbert_nb.commands import minbert_train
    r = run_command(minbert_train, *_args(tmp_path / "smart", "--static_step", "true", "--smart_weight", "1.0", "--epochs", "1"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "static step: off, training eagerly: smart (extra forwards or rows chosen by the data)" in r.stdout
    m = json.loads((tmp_path / "smart" / "metrics.json").read_text())
    assert m["static_step"]["on"] is False and m["static_step"]["fallback"].startswith("smart")

def _pair(peft, cls=TrainStep, amp=None, pair_swap=False, **kw):
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), peft=peft, out="unused", hidden_dropout=0.0, attention_dropout=0.0,
                        head_dropout=0.0, pair_swap=pair_swap).model_config()
    set_seed(0)
    m = MultitaskBert(cfg).train()
    opt = AdamW(param_groups(m, dict(backbone=1e-3, head=3e-3, adapter=3e-3), weight_decay=0.01))
    return m, cls(m, m, opt, make_scheduler(opt, "linear", 6, 2), grad_clip=1.0, amp_dtype=amp, **kw), cfg

def _steps(cfg):
    "Six steps, two with short batches; Quora's batches carry the other order of each pair (`a_swap`) when the model swaps"
    tasks, rows, lens = ["sst", "para", "sts", "para", "sst", "sts"], [8, 3, 8, 8, 5, 8], [6, 9, 5, 12, 7, 6]
    out = []
    for i, (t, b, L) in enumerate(zip(tasks, rows, lens)):
        swap = t == "para" and cfg.pair_swap        # full: a padding row's coin would move the random stream on (as dropout's mask would)
        batch = fake_batch(t, B=8 if swap else b, T=L, vocab=1000, pair_mode=cfg.mode_of(t), seed=i)
        if swap: batch["a_swap"] = fake_batch(t, B=8, T=L - 1, vocab=1000, pair_mode="cross", seed=100 + i)["a"]
        out.append([(t, batch)])
    return out

@pytest.mark.parametrize("peft,swap", [("none", False), ("none", True), ("pal", False), ("prefix", False), ("adapter", False),
                                       ("lora", False), ("dora", False)])
def test_a_static_step_reads_nothing_on_the_host_and_equals_the_eager_step(peft, swap):
    """Six steps of every task, two of them short, under `HostSyncs`: nothing found, and the eager step's weights (fp32).
    `pair_swap` (Quora cross-encoded in a random order per row): the static step draws the order on the device, the same draw here"""
    m1, eager, cfg = _pair(peft, pair_swap=swap)
    for i, bs in enumerate(_steps(cfg)): eager.step(bs, dict(epoch=1, step=i + 1, of=6))
    m2, static, _ = _pair(peft, StaticStep, pair_swap=swap, rows=8, lengths=(8, 16), total_updates=6, sync_every=50)
    steps = _steps(cfg); static.load_epoch(steps)
    with HostSyncs() as hs:
        for i, bs in enumerate(steps): static.step(bs, dict(epoch=1, step=i + 1, of=6))
    assert hs.found == [], hs.found
    p1 = dict(m1.named_parameters())
    worst = max((p - p1[n]).abs().max().item() for n, p in m2.named_parameters())
    assert worst < 1e-5, worst

def test_bf16_autocast_stays_close_to_the_eager_step():
    "bf16 autocast: the padded rows and columns change the rounding of a few sums, not the loss beyond bf16's precision"
    m1, eager, cfg = _pair("none", amp=torch.bfloat16)
    for i, bs in enumerate(_steps(cfg)): eager.step(bs, dict(epoch=1, step=i + 1, of=6))
    m2, static, _ = _pair("none", StaticStep, amp=torch.bfloat16, rows=8, lengths=(8, 16), total_updates=6)
    static.load_epoch(_steps(cfg))
    for i, bs in enumerate(_steps(cfg)): static.step(bs, dict(epoch=1, step=i + 1, of=6))
    assert all(abs(a - b) <= 2e-2 * abs(a) for a, b in zip(eager.stats.losses, static.stats.losses)), (eager.stats.losses, static.stats.losses)
    p1 = dict(m1.named_parameters())
    assert max((p - p1[n]).abs().max().item() for n, p in m2.named_parameters()) < 5e-3

def test_host_syncs_finds_what_would_stall_a_gpu():
    "The checker is not blind: the eager CPU forward's mask reads (on purpose there, 02_bert) and an .item() are found"
    m, _, cfg = _pair("none")
    b = fake_batch("sst", B=4, T=8, vocab=1000)
    with HostSyncs() as hs: m(b).pred.sum().item()
    ops = {op for op, _, _ in hs.found}
    assert {"aten._local_scalar_dense.default", "aten.nonzero.default"} <= ops, hs.found
    assert any(where.startswith("bert.py:") for _, _, where in hs.found)

def test_bound_batch_refuses_what_does_not_fit():
    b = fake_batch("sts", B=3, T=6)
    with pytest.raises(ValueError, match="more than the static batch size 2"): bound_batch(b, 2, (8,))
    with pytest.raises(ValueError, match="longer than the longest static length 4"): bound_batch(b, 4, (4,))
    assert static_lengths(64) == (16, 32, 48, 64) and static_lengths(128) == (32, 64, 96, 128)

class _FakeStream:
    def wait_stream(self, other): pass

class _FakeGraph:
    """`torch.cuda.CUDAGraph` on a CPU, to run the GPU branch of `StaticStep._run_key` here: the capture block runs its step
    (a real capture records it without running), so the replay right after a capture is skipped; a later replay runs the
    recorded step again and writes its results into the outputs the capture returned, as a graph does"""
    capturing = None
    def __init__(self): self.fn, self.outs, self.fresh = None, None, True
    def replay(self):
        if self.fresh: self.fresh = False; return
        losses, gnorm = self.fn()
        for o, n in zip(self.outs[0], losses): o.copy_(n)
        self.outs[1].copy_(gnorm)

def test_the_cuda_graph_branch_keeps_the_eager_steps_weights(monkeypatch):
    """Two epochs through the GPU branch with stand-ins for CUDA's graph and streams: each key's first step eager, its second
    recorded, then replayed; graphs recorded again each epoch; each step's loss read from its own replay. The weights are
    those of the same steps run eagerly: what a GPU run would do, short of CUDA itself"""
    import contextlib, minbert_nb.static_step as S
    real = S.StaticStep._device_step
    def recorded(self, key):
        out = real(self, key)
        g = _FakeGraph.capturing
        if g is not None: g.fn, g.outs = (lambda: real(self, key)), out
        return out
    pools = []
    @contextlib.contextmanager
    def graph(g, pool=None):
        pools.append(pool)
        _FakeGraph.capturing = g
        try: yield
        finally: _FakeGraph.capturing = None
    m1, plain, cfg = _pair("none", StaticStep, rows=8, lengths=(8, 16), total_updates=12, sync_every=50)
    steps = _steps(cfg)
    for epoch in (1, 2):
        plain.load_epoch(steps)
        for i, bs in enumerate(steps): plain.step(bs, dict(epoch=epoch, step=i + 1, of=6))
    monkeypatch.setattr(S.StaticStep, "_device_step", recorded)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph); monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: _FakeStream()); monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    modes = []                                                         # the warm-ups run under the sync debug mode, then restore it
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0); monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    m2, graphed, _ = _pair("none", StaticStep, rows=8, lengths=(8, 16), total_updates=12, sync_every=50)
    graphed.graphs_on, graphed.pool = True, "the-pool"
    counts = []
    for epoch in (1, 2):
        graphed.load_epoch(steps)
        for i, bs in enumerate(steps): graphed.step(bs, dict(epoch=epoch, step=i + 1, of=6))
        counts.append((graphed.eager_steps, graphed.captures, graphed.graph_steps))
    assert len(set(graphed.store.keys)) == 3 and len(graphed.store.keys) == 6    # three shapes, two steps each an epoch
    # (eager, recorded, replayed) after each epoch: epoch 1 runs each shape once eagerly, then records and replays it;
    # epoch 2 records each again at its first step (its stacks are new) and replays twice
    assert counts == [(3, 3, 3), (3, 6, 9)], counts
    assert pools == ["the-pool"] * 6                                  # every recording in the step's one pool
    assert modes == ["warn", 0] * 3 and graphed.syncs == []
    plain.stats.sync(); graphed.stats.sync()
    assert graphed.stats.losses == plain.stats.losses                  # each step's own loss, not the graph's last
    p1 = dict(m1.named_parameters())
    assert all(torch.equal(p, p1[n]) for n, p in m2.named_parameters())

def test_an_mpnet_static_step_equals_the_eager_step():
    "MPNet (relative position bias, positions from the padding token): nothing read on the host, the eager step's weights"
    from minbert_nb.bert import MPNetModel, tiny_mpnet_config
    from minbert_nb.multitask import ModelConfig
    def pair(cls=TrainStep, **kw):
        set_seed(0)
        m = MultitaskBert(ModelConfig(tasks=("sst", "para", "sts"), pooling="mean", sts_head="cosine", head_dropout=0.0),
                          bert=MPNetModel(tiny_mpnet_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))).train()
        opt = AdamW(param_groups(m, dict(backbone=1e-3, head=3e-3, adapter=3e-3), weight_decay=0.01))
        return m, cls(m, m, opt, make_scheduler(opt, "linear", 6, 2), grad_clip=1.0, **kw)
    cfg = ModelConfig(tasks=("sst", "para", "sts"))
    steps = [[(t, fake_batch(t, B=b, T=L, vocab=100, pair_mode=cfg.mode_of(t), seed=i))]
             for i, (t, b, L) in enumerate(zip(["sst", "para", "sts", "sst"], [8, 3, 8, 5], [6, 9, 5, 7]))]
    m1, eager = pair()
    for i, bs in enumerate(steps): eager.step(bs, dict(epoch=1, step=i + 1, of=4))
    m2, static = pair(StaticStep, rows=8, lengths=(8, 16), total_updates=4, sync_every=50)
    static.load_epoch(steps)
    with HostSyncs() as hs:
        for i, bs in enumerate(steps): static.step(bs, dict(epoch=1, step=i + 1, of=4))
    assert hs.found == [], hs.found
    p1 = dict(m1.named_parameters())
    worst = max((p - p1[n]).abs().max().item() for n, p in m2.named_parameters())
    assert worst < 1e-5, worst

def test_a_step_with_nothing_to_train_runs_as_the_eager_one():
    """A frozen encoder with the cosine head trains nothing on STS (pretrain mode, no PEFT): the static step skips the
    backward as TrainStep does, and a step with no gradient at all has a zero norm on the step's device, not the CPU"""
    for cls, kw in ((TrainStep, {}), (StaticStep, dict(rows=8, lengths=(8, 16), total_updates=6))):
        m, st, cfg = _pair("none", cls, **kw)
        for p in m.parameters(): p.requires_grad_(False)
        before = {n: p.clone() for n, p in m.named_parameters()}
        steps = [[("sts", fake_batch("sts", B=5, T=6, vocab=1000, pair_mode=cfg.mode_of("sts")))]]
        if cls is StaticStep: st.load_epoch(steps)
        norms, add = [], st.stats.add_grad_norm
        st.stats.add_grad_norm = lambda g: (norms.append(g), add(g))
        st.step(steps[0], dict(epoch=1, step=1, of=1)); st.stats.sync()
        assert len(st.stats.losses) == 1 and [(g.item(), g.device) for g in norms] == [(0.0, st.device)], (cls.__name__, norms)
        assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())

def test_inductors_own_graphs_make_the_step_eager():
    "--compile_mode reduce-overhead records CUDA graphs inside the compiled code: the static step falls back and says so"
    from minbert_nb.static_step import static_fallback
    m, st, _ = _pair("none")
    assert static_fallback(st) is None and static_fallback(st, compile_mode="default") is None
    assert "reduce-overhead (inductor records CUDA graphs" in static_fallback(st, compile_mode="reduce-overhead")

def test_the_sync_watch_keeps_what_made_the_host_wait(monkeypatch):
    "On CUDA torch warns at a synchronising operation in the sync debug mode: the watch keeps those warnings (file:line) and restores the mode"
    import warnings
    from minbert_nb.static_step import _watch_syncs
    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0); monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    found = []
    with _watch_syncs(found):
        warnings.warn("called a synchronizing CUDA operation"); warnings.warn("something else")
    assert modes == ["warn", 0] and len(found) == 1 and found[0].startswith("test_static_step.py:") and "synchronizing" in found[0]
