"Task schedules against their formulas: proportions over many draws, round-robin/sequential/simultaneous structure, determinism, resumable iterators"
import numpy as np
import pytest, torch
from scipy.stats import chisquare
from torch.utils.data import DataLoader, DistributedSampler
from minbert_nb.samplers import (task_probs, annealed_alpha, ScheduleConfig, TaskSchedule, TaskIterators, plan_summary,
                                 SAMPLED_KINDS)

OFFLINE = dict(sst=534, para=1189, sts=378)      # batches of 16: SST 8,544, quora-extra-train 19,012, STS 6,040
STANDARD = dict(sst=534, para=8845, sts=378)     # quora-train 141,506

def _counts(plan, tasks): return np.array([sum(1 for s in plan if s == (t,)) for t in tasks])

# ---- probabilities -------------------------------------------------------------------------------------------------
def test_task_probs_formula():
    s = dict(a=100, b=400, c=900)
    for alpha in (0.0, 0.2, 0.5, 1.0):
        p = task_probs(s, alpha)
        z = sum(n ** alpha for n in s.values())
        assert p == pytest.approx({k: n ** alpha / z for k, n in s.items()})
    assert task_probs(s, 0.5) == pytest.approx(dict(a=10 / 60, b=20 / 60, c=30 / 60))
    assert list(task_probs(s, 1.0)) == ["a", "b", "c"]

def test_task_probs_scale_invariant():
    "Counting examples or batches of one size gives the same probabilities"
    ex = dict(sst=8544, para=141506, sts=6040)
    assert task_probs(ex, 0.5) == pytest.approx(task_probs({k: v / 16 for k, v in ex.items()}, 0.5))

def test_upweight():
    p = task_probs(dict(sst=100, para=400, sts=100), 1.0, upweight=dict(sst=2, sts=8))
    z = 2 * 100 + 400 + 8 * 100
    assert p == pytest.approx(dict(sst=200 / z, para=400 / z, sts=800 / z))
    with pytest.raises(ValueError, match="not tasks"): task_probs(dict(sst=1), 1.0, upweight=dict(quora=2))
    with pytest.raises(ValueError, match=">= 0"): task_probs(dict(sst=1), 1.0, upweight=dict(sst=-1))
    with pytest.raises(ValueError, match="positive"): task_probs(dict(sst=0, sts=3), 1.0)
    with pytest.raises(ValueError, match="empty"): task_probs({}, 1.0)

def test_annealed_alpha():
    assert [annealed_alpha(e, 5) for e in range(1, 6)] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2])
    assert annealed_alpha(1, 1) == 1.0
    for bad in (0, 6):
        with pytest.raises(ValueError, match="1-based"): annealed_alpha(bad, 5)
    with pytest.raises(ValueError): annealed_alpha(1, 0)

# ---- config ----------------------------------------------------------------------------------------------------------
def test_config_validation():
    with pytest.raises(ValueError, match="unknown"): ScheduleConfig("anneal")
    with pytest.raises(ValueError, match="sampled kinds"): ScheduleConfig("simultaneous", upweight=dict(sst=2))
    with pytest.raises(ValueError, match="alpha"): ScheduleConfig("custom")
    with pytest.raises(ValueError, match="alpha"): ScheduleConfig("sqrt", alpha=0.3)
    with pytest.raises(ValueError, match="steps_per_epoch"): ScheduleConfig("sqrt", steps_per_epoch=0)
    with pytest.raises(ValueError, match="sequential_epochs"): ScheduleConfig("round_robin", sequential_epochs=dict(sst=1))
    with pytest.raises(ValueError, match="not tasks"): TaskSchedule(ScheduleConfig("sqrt", upweight=dict(x=2)), OFFLINE, 2)
    with pytest.raises(ValueError, match="positive whole"): TaskSchedule(ScheduleConfig(), dict(sst=0, sts=2), 2)
    with pytest.raises(ValueError, match="empty"): TaskSchedule(ScheduleConfig(), {}, 2)

# ---- sampled kinds ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,epoch", [("proportional", 1), ("sqrt", 1), ("annealed", 1), ("annealed", 5),
                                        ("annealed", 10), ("custom", 1)])
@pytest.mark.parametrize("sizes", [OFFLINE, STANDARD])
def test_sampled_proportions_match_formula(kind, epoch, sizes):
    "100k draws: chi-square goodness of fit to task_probs, and every share within 0.5 percentage points"
    cfg = ScheduleConfig(kind, steps_per_epoch=100_000, alpha=0.3 if kind == "custom" else None, seed=epoch)
    sch = TaskSchedule(cfg, sizes, total_epochs=10)
    want = sch.probs(epoch)
    alpha = dict(proportional=1.0, sqrt=0.5, custom=0.3).get(kind) or annealed_alpha(epoch, 10)
    assert want == pytest.approx(task_probs(sizes, alpha))
    plan = sch.plan(epoch)
    assert len(plan) == 100_000
    obs = _counts(plan, list(sizes))
    assert obs.sum() == 100_000
    assert chisquare(obs, np.array([want[t] for t in sizes]) * 100_000).pvalue > 1e-3
    emp = plan_summary(plan)
    for t in sizes: assert abs(emp[t] - want[t]) < 5e-3

def test_upweighted_annealed_proportions():
    sch = TaskSchedule(ScheduleConfig("annealed", steps_per_epoch=100_000, upweight=dict(sst=4, sts=8)), STANDARD, 10)
    for e in (1, 10):
        want = sch.probs(e)
        assert want == pytest.approx(task_probs(STANDARD, annealed_alpha(e, 10), dict(sst=4, sts=8)))
        obs = _counts(sch.plan(e), list(STANDARD))
        assert chisquare(obs, np.array([want[t] for t in STANDARD]) * 100_000).pvalue > 1e-3

def test_sampled_default_epoch_length():
    for kind in ("proportional", "sqrt", "annealed"):
        sch = TaskSchedule(ScheduleConfig(kind), OFFLINE, 3)
        assert sch.n_steps(1) == len(sch.plan(1)) == sum(OFFLINE.values())
        assert sch.total_steps == 3 * sum(OFFLINE.values())
    fixed = TaskSchedule(ScheduleConfig("annealed", steps_per_epoch=2400), OFFLINE, 25)   # Liu & Shen (000)
    assert len(fixed.plan(7)) == 2400 and fixed.total_steps == 25 * 2400

def test_determinism_per_seed_and_epoch():
    mk = lambda seed: TaskSchedule(ScheduleConfig("sqrt", steps_per_epoch=500, seed=seed), OFFLINE, 4)
    a, b = mk(0), mk(0)
    for e in range(1, 5): assert a.plan(e) == b.plan(e) == a.plan(e)
    assert a.plan(1) != a.plan(2)
    assert a.plan(1) != mk(1).plan(1)
    with pytest.raises(ValueError, match="1-based"): a.plan(0)
    with pytest.raises(ValueError, match="1-based"): a.plan(5)

def test_resume_skips_first_steps():
    sch = TaskSchedule(ScheduleConfig("annealed", steps_per_epoch=300), OFFLINE, 5)
    full = sch.plan(3)
    again = TaskSchedule(ScheduleConfig("annealed", steps_per_epoch=300), OFFLINE, 5).plan(3)
    assert again[120:] == full[120:]

# ---- deterministic kinds ---------------------------------------------------------------------------------------------
def test_round_robin_count_and_order():
    sch = TaskSchedule(ScheduleConfig("round_robin"), OFFLINE, 2)
    plan = sch.plan(1)
    assert len(plan) == 3 * 378
    assert plan[:6] == [("sst",), ("para",), ("sts",)] * 2
    assert plan == [("sst",), ("para",), ("sts",)] * 378
    assert plan_summary(plan) == pytest.approx(dict(sst=1 / 3, para=1 / 3, sts=1 / 3))
    assert sch.plan(2) == plan
    assert TaskSchedule(ScheduleConfig("round_robin"), dict(para=5, sts=2), 1).plan(1) == [("para",), ("sts",)] * 2
    assert len(TaskSchedule(ScheduleConfig("round_robin", steps_per_epoch=2400), OFFLINE, 1).plan(1)) == 2400

def test_sequential_within_epoch():
    nb = dict(sst=3, para=5, sts=2)
    plan = TaskSchedule(ScheduleConfig("sequential"), nb, 2).plan(2)
    assert plan == [("sst",)] * 3 + [("para",)] * 5 + [("sts",)] * 2
    order = dict(para=5, sts=2, sst=3)          # Wang (004)'s order: paraphrase, similarity, sentiment
    plan = TaskSchedule(ScheduleConfig("sequential"), order, 1).plan(1)
    assert [t for i, (t,) in enumerate(plan) if i == 0 or plan[i - 1] != (t,)] == ["para", "sts", "sst"]
    fixed = TaskSchedule(ScheduleConfig("sequential", steps_per_epoch=10), nb, 1).plan(1)
    assert fixed == [("sst",)] * 4 + [("para",)] * 3 + [("sts",)] * 3

def test_sequential_phases_seed004():
    nb = dict(sst=3, para=5, sts=2)
    cfg = ScheduleConfig("sequential", sequential_epochs=dict(para=2, sts=3, sst=5))
    sch = TaskSchedule(cfg, nb, 10)
    tasks = [set(s for s in sch.plan(e)) for e in range(1, 11)]
    assert tasks == [{("para",)}] * 2 + [{("sts",)}] * 3 + [{("sst",)}] * 5
    assert [sch.n_steps(e) for e in (1, 3, 6)] == [5, 2, 3]
    assert sch.total_steps == 2 * 5 + 3 * 2 + 5 * 3
    with pytest.raises(ValueError, match="summing"): TaskSchedule(cfg, nb, 9)
    with pytest.raises(ValueError, match="not tasks"):
        TaskSchedule(ScheduleConfig("sequential", sequential_epochs=dict(qqp=1)), nb, 1)

def test_simultaneous_structure():
    sch = TaskSchedule(ScheduleConfig("simultaneous"), OFFLINE, 4)
    plan = sch.plan(1)
    assert len(plan) == OFFLINE["sst"]                       # one epoch = one pass over SST (Wang (004))
    assert all(s == ("sst", "para", "sts") for s in plan)
    assert sch.total_steps == 4 * 534
    assert len(TaskSchedule(ScheduleConfig("simultaneous", steps_per_epoch=100), OFFLINE, 1).plan(1)) == 100
    assert TaskSchedule(ScheduleConfig("simultaneous", anchor=None), OFFLINE, 1).n_steps(1) == 1189   # largest
    assert TaskSchedule(ScheduleConfig("simultaneous", anchor="sts"), OFFLINE, 1).n_steps(1) == 378
    with pytest.raises(ValueError, match="anchor"): TaskSchedule(ScheduleConfig("simultaneous"), dict(para=3, sts=2), 1)
    assert sch.alpha(1) is None and sch.probs(1) is None

# ---- iterators -------------------------------------------------------------------------------------------------------
def _loader(n=10, bs=3): return DataLoader(torch.arange(n), batch_size=bs, shuffle=True)

def test_iterators_cover_every_batch_once_per_pass():
    its = TaskIterators(dict(sst=_loader(10, 3), sts=_loader(7, 2)), seed=0)
    passes = []
    for p in range(4):
        passes.append(torch.cat([its.next("sst") for _ in range(4)]))
        assert sorted(passes[-1].tolist()) == list(range(10))
    assert len({tuple(x.tolist()) for x in passes}) > 1        # reshuffled
    got = torch.cat([its.next("sts") for _ in range(8)])       # 2 passes of 4 batches
    assert sorted(got[:7].tolist()) == list(range(7)) and sorted(got[7:].tolist()) == list(range(7))
    assert its.state_dict()["passes"] == dict(sst=3, sts=1)
    assert its.state_dict()["positions"] == dict(sst=4, sts=4)

def test_iterators_seeded_shuffle_reproducible():
    a, b = (TaskIterators(dict(sst=_loader()), seed=5) for _ in range(2))
    for _ in range(9): assert torch.equal(a.next("sst"), b.next("sst"))
    first_pass = lambda seed: [x.tolist() for x in (lambda it: [it.next("sst") for _ in range(4)])(TaskIterators(dict(sst=_loader()), seed=seed))]
    assert first_pass(5) == first_pass(5) != first_pass(6)

@pytest.mark.parametrize("used", [0, 3, 4, 5, 11])
def test_iterators_state_round_trip(used):
    a = TaskIterators(dict(sst=_loader(), sts=_loader(5, 2)), seed=3)
    for i in range(used): a.next("sst"); a.next("sts")
    state = a.state_dict()
    b = TaskIterators(dict(sst=_loader(), sts=_loader(5, 2)), seed=3)
    b.load_state_dict(state)
    for _ in range(9):
        for t in ("sst", "sts"): assert torch.equal(a.next(t), b.next(t))

def test_iterators_use_set_epoch():
    "A sampler with set_epoch (DistributedSampler) is told the pass number, so no seed is needed"
    ds = torch.arange(12)
    mk = lambda: DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0))
    a = TaskIterators(dict(para=mk()))
    seen = [a.next("para") for _ in range(7)]
    assert a.loaders["para"].sampler.epoch == 2                 # 3 batches a pass: the 7th batch starts pass 2
    assert sorted(torch.cat(seen[:3]).tolist()) == list(range(12))
    b = TaskIterators(dict(para=mk())); b.load_state_dict(a.state_dict())
    for _ in range(5): assert torch.equal(a.next("para"), b.next("para"))

def test_iterators_errors():
    its = TaskIterators(dict(sst=DataLoader(torch.arange(0), batch_size=2)))
    with pytest.raises(ValueError, match="no batches"): its.next("sst")
    with pytest.raises(KeyError, match="no loader"): its.next("para")
    a = TaskIterators(dict(sst=_loader()))
    with pytest.raises(ValueError, match="differ"): a.load_state_dict(dict(passes=dict(sts=0), positions=dict(sts=0)))
    a.load_state_dict(dict(passes=dict(sst=0), positions=dict(sst=9)))
    with pytest.raises(ValueError, match="only 4"): a.next("sst")

def test_schedule_with_iterators_simultaneous():
    "Wang (004): STS wraps inside an SST epoch, Quora continues across epochs"
    sch = TaskSchedule(ScheduleConfig("simultaneous"), dict(sst=4, para=10, sts=2), 3)
    its = TaskIterators(dict(sst=_loader(12, 3), para=_loader(30, 3), sts=_loader(4, 2)), seed=0)
    for e in (1, 2, 3):
        for step in sch.plan(e): [its.next(t) for t in step]
    st = its.state_dict()
    assert (st["passes"], st["positions"]) == (dict(sst=2, para=1, sts=5), dict(sst=4, para=2, sts=2))
