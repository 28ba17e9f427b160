"""Run report tables on a remote GPU machine inside a fixed time, and land the finished run folders here.

The remote runner gives minutes of one GPU, one command at a time (10 minutes at most); it sends the working tree
(64 MiB at most, with the ignored paths it is told to carry) and brings back at most 8 files from $OUT. Three steps:

    python tools/gpu_tables.py chains --tables 002-T2 --chains 6 # here: what is left of those tables as balanced chains (and the
                                                                 # ensembles to combine here after land: run with --predictions)
    python tools/gpu_tables.py stage --tables 004-T3,004-T4      # here: those tables' run folders into the pack, and
                                                                 # whether the tree and the pack fit what the tool sends
    python3 tools/gpu_tables.py run --out $OUT --minutes 7 --hard-minutes 9 \\
        --chain 004-T4:0:5,6 004-T3:0:5,6,7,8,9,10 --chain ...   # there (carrying gpu-pack/)
    python tools/gpu_tables.py land /work/.device/N/gpu-runs.tar.gz   # here: the new rows into results/ablate, tables again

`run` runs `minbert_ablate` calls as chains: each chain's calls one after another (a table whose rows copy a twin's run, or
an ensemble of its members, follows them), several chains at once on the one GPU, each process with its share of the cores.
No row starts training after `--minutes` (`minbert_ablate --until`), but the calls go on until `--hard-minutes`: what trains
nothing (a copy of a twin's finished run, an ensemble of finished members, a row done already) still goes through after
`--minutes`. Processes still running at `--hard-minutes` are stopped (that row is lost, the others stay); every 45 s and at the end the run folders (no checkpoints; dev predictions only with
`--predictions`: this call's new runs' only, as OUT/gpu-predictions-K.tar.gz parts under the tool's 16 MiB a file) and the logs go into OUT/gpu-runs.tar.gz, beside OUT/gpu-tables.json (each call's
times, each row's status and wall time) and OUT/gpu-util.csv (GPU busy % and memory every 2 s). Each file is written three
folders below OUT first (the runner sends back two) and moved into place whole, so a kill at any moment leaves the last
complete archive; a failed archive is said and tried again. The calls run in process groups of this command's session:
when the runner ends the command (its time limit), it ends them too, and an error here stops them on the way out. At most
8 chains run at once (`--workers`): about 2.5 GiB of GPU memory and two cores each.

A chain is `TABLE:SEED:ROWS` calls, space-separated; `--chain` again for another. `minbert_ablate --plan --device cuda` (run
here) prints the calls a GPU would make as such chains: a claim whose seeds began on the CPU goes on there at spare seeds. Rows already finished in the staged
folders are not run again (`minbert_ablate` resumes). `land` adds only rows this repository does not have, and refuses a
seed folder whose runs here trained on another device: a claim's rows must not mix devices within a seed. The landed
files are rewritten with repository-relative paths (`tools/portable_results.py`). `chains --budget` lists the budget
question's rows (the contradicted claims at twice the budget, scale short2x) and prints the whole `run` command.
"""
import argparse, io, json, os, shutil, signal, subprocess, sys, tarfile, tempfile, threading, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/"tools"))
from pack_gpu import MAX_BYTES as LIMIT             # what the remote runner sends: the working tree and the carried paths
PART = 15 * 2**20                                    # what it brings back: files of at most 16 MiB, 8 files at most
_safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
PARTIAL = Path(".partial")/"aside"                   # files being written, three folders below OUT: the runner sends back two

def _skip(predictions:bool, figures:bool=True):
    "A tar filter: no checkpoints, no hidden files, dev predictions only when `predictions`, figures unless not `figures`"
    return lambda ti: None if (ti.name.endswith(".pt") or "/." in ti.name or (not figures and ti.name.endswith(".png"))
                               or (("/predictions" in ti.name) != predictions and not ti.isdir())) else ti

def _add_tree(t:tarfile.TarFile, root:Path, arcname:str, keep=lambda ti: ti):
    """`root` into `t` under `arcname`, file by file, each read whole first: a file that goes away meanwhile (an atomic
    write's temporary, a lock) is passed over, where `TarFile.add` would raise. Only files: folders come with them"""
    for dp, dirs, files in os.walk(root):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(dp, n)
            ti = tarfile.TarInfo(os.path.normpath(os.path.join(arcname, os.path.relpath(p, root))))
            if keep(ti) is None: continue
            try: data, st = Path(p).read_bytes(), os.stat(p)
            except OSError: continue
            ti.size, ti.mtime, ti.mode = len(data), int(st.st_mtime), 0o644
            t.addfile(ti, io.BytesIO(data))

def _tar(dest:Path, folders, predictions:bool=False, extra=(), figures:bool=True):
    """`folders` (each under its own name) and `extra` ((path, name) pairs) into dest.tar.gz, written aside (in a folder
    the remote runner does not bring back), then moved in"""
    aside = dest.parent/PARTIAL/"tar"; aside.mkdir(parents=True, exist_ok=True)
    tmp = aside/dest.name
    with tarfile.open(tmp, "w:gz", compresslevel=6) as t:
        for d in folders: _add_tree(t, Path(d), Path(d).name, _skip(predictions, figures))
        for p, name in extra:
            if Path(p).is_dir(): _add_tree(t, Path(p), name)
            elif Path(p).is_file(): t.add(p, arcname=name)
    os.replace(tmp, dest)

def prediction_parts(out:Path, results:Path, runs, limit:int=PART) -> list:
    """The dev predictions of run folders `runs` (under `results`) as OUT/gpu-predictions-K.tar.gz, each under `limit` bytes
    (the remote runner brings back no larger file): a run's files stay in one part, a part over the limit is halved and written
    again. Returns the parts (none when the runs have no predictions)"""
    aside = out/PARTIAL/"predictions"                     # written there first: a kill while writing keeps the last parts
    shutil.rmtree(aside, ignore_errors=True); aside.mkdir(parents=True)
    files = lambda run: sorted(f for f in Path(run).rglob("*") if f.is_file() and "predictions" in f.relative_to(run).parts[:1])
    todo, parts = [[r for r in sorted(runs) if files(r)]], []
    while todo:
        g = todo.pop(0)
        if not g: continue
        dest = aside/f"gpu-predictions-{len(parts) + 1}.tar.gz"
        with tarfile.open(dest, "w:gz") as t:
            for r in g:
                for f in files(r):
                    try: t.add(f, arcname=str(f.relative_to(results)))
                    except OSError: pass                         # gone meanwhile
        if dest.stat().st_size > limit and len(g) > 1: dest.unlink(); todo[:0] = [g[:len(g) // 2], g[len(g) // 2:]]
        else:
            if dest.stat().st_size > limit: print(f"note: {dest.name}: {dest.stat().st_size / 2**20:.1f} MiB, one run's predictions alone: over what the remote runner brings back")
            parts.append(dest)
    for old in out.glob("gpu-predictions-*.tar.gz"): old.unlink()
    parts = [Path(shutil.move(str(p), str(out/p.name))) for p in parts]
    if len(parts) > 5: print(f"note: {len(parts)} prediction parts: the remote runner brings back 8 files, 3 of them the runs, the summary and the GPU log")
    return parts

def stage(tables, results:Path, pack:Path, scale:str="short") -> Path:
    "The run folders of `tables` (TABLE-SCALE under `results`, no predictions) as pack/results.tar.gz; says whether the send fits"
    folders = [results/f"{t}-{scale}" for t in tables]
    for f in folders:
        if not (f/"ablate.json").is_file(): sys.exit(f"gpu_tables stage: {f} is no table folder (no ablate.json); run `minbert_ablate --plan` for the names.")
    if not (pack/"manifest.json").is_file(): sys.exit(f"gpu_tables stage: {pack} holds no pack; run `make gpu-pack` first.")
    dest = pack/"results.tar.gz"; _tar(dest, folders, figures=False)   # figures: redrawn from the runs (`table_from_runs`)
    for d in ("site", "data"):                                   # a pack unpacked here (a test of it) would travel too
        if (pack/d).exists(): print(f"note: {pack/d} is an unpacked copy; it would travel with the pack: delete it")
    carried = sum(p.stat().st_size for p in pack.rglob("*") if p.is_file())
    from pack_gpu import _tree_bytes
    tree = _tree_bytes()
    print(f"staged {', '.join(f.name for f in folders)}: {dest.stat().st_size / 2**20:.1f} MiB; the tree {tree / 2**20:.1f} MiB + the pack "
          f"{carried / 2**20:.1f} MiB = {(tree + carried) / 2**20:.1f} MiB of the {LIMIT / 2**20:.0f} MiB the remote runner sends")
    if tree + carried > LIMIT:
        print("over: leave results/ behind for the call (the staged tables travel in the pack), and put it back after:\n"
              "  git rm -r -q --cached results && echo /results/ >> .git/info/exclude      # before the call\n"
              "  git reset -q -- results && sed -i '\\|^/results/$|d' .git/info/exclude     # right after it (commit nothing between)")
    return dest

def _smi(dest:Path, stop:threading.Event):
    "GPU busy % and memory every 2 s into dest (CSV)"
    with open(dest, "w") as f:
        f.write("t,util_pct,mem_mib\n")
        t0 = time.time()
        while not stop.wait(2):
            try: r = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                                    capture_output=True, text=True, timeout=10).stdout.strip().split("\n")[0]
            except (OSError, subprocess.SubprocessError): continue
            if r: f.write(f"{time.time() - t0:.0f},{r.replace(' ', '')}\n"); f.flush()

def run(a):
    t0 = time.time(); until, hard = t0 + 60 * a.minutes, t0 + 60 * a.hard_minutes
    out, results, pack = Path(a.out), Path(a.results), Path(a.pack)
    logs, stamp = results.parent/"logs", time.strftime("%H%M%S")     # a second run on a warm machine keeps the first one's logs
    for d in (out, results, logs): d.mkdir(parents=True, exist_ok=True)
    from pack_gpu import unpack
    site, data = unpack(pack)
    if (pack/"results.tar.gz").is_file():                        # the staged tables: their finished rows are not run again
        with tarfile.open(pack/"results.tar.gz") as t: t.extractall(results, **_safe)
    staged = {p.parent for p in results.rglob("metrics.json")} | {p.parent for p in results.rglob("row.json")}
    given = list(a.chain or [])
    if a.chains_file:                                            # one chain a line (the runner takes commands of 2,000 characters)
        f = Path(a.chains_file)
        if not f.is_file(): sys.exit(f"gpu_tables run: --chains-file {f}: not found; `chains --write` makes it (in gpu-pack/, which travels).")
        given += [ln.split() for ln in f.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    if not given: sys.exit("gpu_tables run: no chain: give --chain TABLE:SEED:ROWS ... or --chains-file FILE.")
    chains = [[c.split(":") for c in ch] for ch in given]
    for ch in chains:
        for c in ch:
            if len(c) != 3: sys.exit(f"gpu_tables run: {':'.join(c)!r}: expected TABLE:SEED:ROWS, e.g. 004-T3:0:5,6")
    workers = a.workers or min(len(chains), 8)             # about 2.5 GiB of GPU memory and two cores each
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
           "MINBERT_DATA": str(data), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": str(max(1, cores // workers)), "MINBERT_CACHE": str(results.parent/"cache")}
    print(f"unpacked in {time.time() - t0:.0f} s ({len(staged)} staged runs); {len(chains)} chains, {workers} at a time, "
          f"{env['OMP_NUM_THREADS']} threads each; no row after {a.minutes} min, stop at {a.hard_minutes} min", flush=True)
    stop = threading.Event(); threading.Thread(target=_smi, args=(out/"gpu-util.csv", stop), daemon=True).start()
    calls, lock, procs = [], threading.Lock(), set()
    def chain(cs):
        for table, seed, rows in cs:                             # after `until` a call still copies and combines (it trains nothing)
            if time.time() >= hard: break
            log = logs/f"{stamp}-{table}-seed{seed}-rows{rows.replace(',', '_')}.log"
            cmd = [sys.executable, "-m", "minbert_nb.reproduce", "--table", table, "--scale", a.scale, "--seeds", seed, "--rows", rows,
                   "--out", str(results/f"{table}-{a.scale}"), "--device", a.device, "--quiet", "--until", str(until)]
            rec = dict(table=table, seed=int(seed), rows=rows, start_s=round(time.time() - t0, 1))
            with open(log, "w") as f:
                pr = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, process_group=0)   # killable as a group;
                # not a new session: the remote runner ends what this command started when it ends
                with lock: procs.add(pr)
                rc = pr.wait()
                with lock: procs.discard(pr)
            rec.update(end_s=round(time.time() - t0, 1), rc=rc)
            with lock: calls.append(rec)
            print(f"[{rec['end_s']:6.0f} s] {table} seed {seed} rows {rows}: rc {rc} ({rec['end_s'] - rec['start_s']:.0f} s)", flush=True)
            if rc: print(log.read_text()[-3000:], flush=True)
    def summary():
        rows = [(f.parent, json.loads(f.read_text())) for f in sorted(results.rglob("row.json")) if f.parent not in staged]
        s = dict(wall_s=round(time.time() - t0, 1), workers=workers, threads=env["OMP_NUM_THREADS"], calls=list(calls),
                 rows=[dict(table=r.get("table"), row=r.get("row"), folder=os.path.relpath(d, results), status=r.get("status"),
                            wall_s=round(r.get("wall_s") or 0, 1), overall=(r.get("metrics") or {}).get("overall"),
                            device=(r.get("metrics") or {}).get("device")) for d, r in rows])
        aside = out/PARTIAL/"summary"; aside.mkdir(parents=True, exist_ok=True)
        (aside/"gpu-tables.json").write_text(json.dumps(s, indent=1)); os.replace(aside/"gpu-tables.json", out/"gpu-tables.json")
        return s
    def archive():
        try:
            tables = sorted(d for d in results.iterdir() if (d/"ablate.json").is_file())
            _tar(out/"gpu-runs.tar.gz", tables, extra=[(logs, "gpu-logs")])
            if a.predictions: prediction_parts(out, results, {p.parent for p in results.rglob("metrics.json")} - staged)   # this call's runs
            return summary()
        except Exception as e: print(f"note: writing the archive failed ({type(e).__name__}: {e}); the next try keeps what this one lost", flush=True)
    def stop_all():
        with lock:
            for pr in procs:
                try: os.killpg(pr.pid, signal.SIGKILL)
                except OSError: pass
            return len(procs)
    try: _loop(chains, chain, workers, hard, t0, stop_all, archive)
    finally:
        stopped = stop_all()
        if stopped: print(f"[{time.time() - t0:6.0f} s] {stopped} process(es) stopped on the way out", flush=True)
        stop.set()
        s = archive() or summary()
    ok = sum(r["status"] == "ok" for r in s["rows"])
    print(f"done in {s['wall_s']:.0f} s: {ok} new rows ok of {len(s['rows'])}; archive {(out/'gpu-runs.tar.gz').stat().st_size / 2**20:.1f} MiB")
    return s

def _loop(chains, chain, workers, hard, t0, stop_all, archive):
    "Start chains as workers free up; at `hard` stop every process; the archive every 45 s"
    pending, running, last = list(chains), [], time.time()
    while pending or running:
        running = [t for t in running if t.is_alive()]
        while pending and len(running) < workers and time.time() < hard:
            t = threading.Thread(target=chain, args=(pending.pop(0),), daemon=True); t.start(); running.append(t)
        if time.time() >= hard:
            print(f"[{time.time() - t0:6.0f} s] hard stop: {stop_all()} process(es) stopped", flush=True)
            time.sleep(2); break
        if time.time() - last > 45: archive(); last = time.time()
        time.sleep(1)

def row_cost(table_id:str, name:str, scale:str="short", first_phase:bool=True) -> float:
    """What training a row costs, in plain runs of the scale's 23,040 examples: the examples of all its runs and phases (epochs x
    steps an epoch x the batch, x the tasks of a step with the simultaneous sampler; a contrastive phase's own batch), times 3
    for SMART (three forwards a batch); 0 for an ensemble (it combines predictions); without its first phase where `first_phase`
    is False (copied from another row's run: `twin_phase`). Wang (004)'s Table 2 on the CPU: rows 4 and 5 (3.0 each) took
    59-73 min each, rows 1-3 (1.0) 14-23 min"""
    from minbert_nb.ablate import TABLES, row_configs
    from minbert_nb.config import TrainConfig
    from minbert_nb.phases import phase_configs
    t = TABLES[table_id]; row = t.row(name)
    if row.ensemble or row.same_as: return 0.0
    examples = 0
    for cfg in row_configs(t, row, scale):
        c = TrainConfig(**{k: v for k, v in cfg.items() if k != "preset"})
        for p in ([pc for _, pc in phase_configs(c)][0 if first_phase else 1:] if c.phases else [c]):
            per = len(p.tasks) if p.sampler == "simultaneous" else 1         # a simultaneous step: a batch of every task
            batch = p.contrastive_batch if p.contrastive_only else p.batch_size
            examples += (p.epochs or 1) * (p.steps_per_epoch or 240) * batch * per * (3 if p.smart_weight else 1)
    return round(examples / 23_040, 2)

def chains(tables, results:Path, scale:str="short", k:int=6, device:str="cuda", ensembles_there:bool=False, budget:bool=False) -> tuple:
    """The runs `minbert_ablate --plan --device DEVICE` still lists for `tables` (seeds that began on another device left out), as
    at most `k` chains for `run`, balanced by cost (`row_cost`). Rows that must run in order stay in one chain, in order: a copy
    after the twin it copies, a row that copies its first phase after the row that trains it (Lee & Li (002)'s MNRL rows), and with
    `ensembles_there`, an ensemble after its members; every other group runs beside the rest
    (two calls on one seed folder at once are fine: each writes its own rows, and `land` writes the tables again). By default the
    ensembles stay out of the chains: their members spread over all of them (Lee & Li (002)'s 5-ensemble alone has 21 runs' worth of
    members a seed), `run --predictions` brings the members' dev predictions back, and the ensembles combine here after `land`
    (an ensemble trains nothing: any machine may combine it). Returns ([(cost, ["TABLE:SEED:ROWS", ...])], the costliest chain
    first; ["TABLE:SEED:ROWS", ...] of the ensembles to combine here). `budget`: the budget question's rows instead (the
    contradicted claims' rows at `BUDGET_SCALE`, as `minbert_ablate plan --budget`)"""
    from minbert_nb.ablate import TABLES
    from minbert_nb.reproduce import plan_frame, reads, run_order, seed_device, budget_claims, BUDGET_SCALE
    if budget and scale not in ("short", BUDGET_SCALE): sys.exit(f"gpu_tables chains: --budget runs at scale {BUDGET_SCALE}; drop --scale {scale}.")
    if budget: scale = BUDGET_SCALE
    plan = plan_frame(results, scale, device=device, claims=budget_claims(results) if budget else None)
    plan = plan[plan.table.isin(tables) & (plan["missing"].map(len) > 0)]
    nodes, parent, after = {}, {}, {}
    for _, r in plan.iterrows():
        for s in r["missing"]:
            if seed_device(r["out"], s, device) != device: continue     # that seed began elsewhere: it waits for that device
            copy, half = s in r["copies"], s in r["phase_copies"]
            if r["ensemble"] and not ensembles_there: after.setdefault((r["table"], s), []).append(r["row"]); continue
            nodes[(r["table"], s, r["name"])] = dict(row=r["row"], copy=copy, ensemble=r["ensemble"],
                                                    cost=0 if copy else row_cost(r["table"], r["name"], scale, first_phase=not half),
                                                    twins=[tuple(x.split(" / ", 1)) for x in f"{r['twins']}; {r['phase_twins']}".split("; ") if x])
    find = lambda x: x if parent.get(x, x) == x else find(parent[x])
    def union(a, b): parent[find(a)] = find(b)
    for (t, s, n), v in nodes.items():
        for m in reads(TABLES[t], TABLES[t].row(n).ensemble):
            if (t, s, m) in nodes: union((t, s, n), (t, s, m))
        for tt, nn in v["twins"]:
            if (tt, s, nn) in nodes: union((t, s, n), (tt, s, nn))
    groups = {}
    for x in nodes: groups.setdefault(find(x), []).append(x)
    tpos = {t: i for i, t in enumerate(TABLES)}
    def items(g):
        g = sorted(g, key=lambda x: (nodes[x]["ensemble"], nodes[x]["copy"], tpos[x[0]], x[1], run_order(x[0]).index(x[2])))
        out = []
        for t, s, n in g:
            if out and out[-1][:2] == (t, s): out[-1][2].append(nodes[(t, s, n)]["row"])
            else: out.append((t, s, [nodes[(t, s, n)]["row"]]))
        return [f"{t}:{s}:{','.join(map(str, rs))}" for t, s, rs in out]
    cost = lambda g: round(sum(nodes[x]["cost"] for x in g), 1)
    out = [[0, []] for _ in range(max(1, k))]
    for g in sorted(groups.values(), key=lambda g: (-cost(g), sorted(g))):   # the longest group first, into the least loaded chain
        c = min(out, key=lambda c: c[0]); c[0] = round(c[0] + cost(g), 1)
        for it in items(g):                                                   # one call for neighbours of one table and seed
            if c[1] and c[1][-1].rsplit(":", 1)[0] == it.rsplit(":", 1)[0]: c[1][-1] += "," + it.rsplit(":", 1)[1]
            else: c[1].append(it)
    return (sorted([tuple(c) for c in out if c[1]], key=lambda c: -c[0]),
            [f"{t}:{s}:{','.join(map(str, sorted(rs)))}" for (t, s), rs in sorted(after.items(), key=lambda x: (tpos[x[0][0]], x[0][1]))])

def land(archive:Path, results:Path, predictions=None, tables_again:bool=True) -> list:
    """The rows of `archive` (`run`'s gpu-runs.tar.gz) that `results` lacks, copied in (with their dev predictions from
    `predictions`, if given: `run`'s gpu-predictions-K.tar.gz parts, one path or a list). Every seed is checked before anything is copied: one whose runs here trained on another device
    refuses the whole archive. A row folder here without row.json (a run under way, or one that stopped) is left alone, and
    said. Returns the new row folders"""
    from minbert_nb.ablate import run_devices
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for arc in [archive, *([predictions] if isinstance(predictions, (str, Path)) else predictions or [])]:
            with tarfile.open(arc) as t: t.extractall(tmp, **_safe)
        todo = []                                                     # (table folder there, seed folder there, its new rows)
        for table in sorted(d for d in tmp.iterdir() if (d/"ablate.json").is_file()):
            here = results/table.name
            for seed in sorted(d for d in table.iterdir() if d.name.startswith("seed-") and (d/"rows").is_dir()):
                rows = [r for r in sorted((seed/"rows").iterdir()) if (r/"row.json").is_file() and not (here/seed.name/"rows"/r.name/"row.json").is_file()]
                if not rows: continue
                theirs, ours = run_devices(seed), run_devices(here/seed.name)
                if ours and ours != theirs:
                    sys.exit(f"gpu_tables land: {here/seed.name} holds runs trained on {', '.join(sorted(ours))}, the archive's on "
                             f"{', '.join(sorted(theirs))}: a claim's rows must not mix devices within a seed; nothing landed.")
                todo.append((table, seed, rows))
        new, touched = [], set()
        for table, seed, rows in todo:
            here = results/table.name
            for r in rows:
                dest = here/seed.name/"rows"/r.name
                if dest.exists():
                    print(f"note: {dest} holds a run without row.json here (under way, or stopped): left alone; delete it to land the archive's"); continue
                dest.parent.mkdir(parents=True, exist_ok=True); shutil.copytree(r, dest); new.append(dest); touched.add(table.name)
            if table.name in touched and not (here/"ablate.json").is_file(): shutil.copy2(table/"ablate.json", here/"ablate.json")
    portable(new, results)
    if tables_again and touched:
        from minbert_nb.reproduce import table_from_runs
        for name in sorted(touched):
            a = json.loads((results/name/"ablate.json").read_text()); table_from_runs(a["table"], results/name, a.get("scale") or "short")
    print(f"landed {len(new)} rows in {', '.join(sorted(touched)) or 'no table'}")
    return new

def portable(folders, results:Path):
    """The files of landed row `folders` with repository-relative paths (`tools/portable_results.py`: the remote's
    /tmp/gpu-results/... becomes results/..., its checkout the repository), as every committed results file holds"""
    import portable_results as PR
    if not results.resolve().is_relative_to(ROOT): return
    for d in folders:
        for f in (p for p in Path(d).rglob("*") if p.is_file() and p.suffix in PR.TEXT):
            rel, old = f.resolve().relative_to(ROOT).as_posix(), f.read_text(errors="replace")
            try: new = PR._json_file(f, rel) if f.name in ("config.json", "row.json") else PR._text(old, rel)
            except json.JSONDecodeError: new = PR._text(old, rel)
            if new != old: f.write_text(new)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("stage", help="here: the tables to continue into the pack; whether the send fits")
    s.add_argument("--tables", required=True, help="table ids, e.g. 004-T3,004-T4")
    s.add_argument("--results", default=str(ROOT/"results"/"ablate")); s.add_argument("--pack", default=str(ROOT/"gpu-pack"))
    s.add_argument("--scale", default="short")
    r = sub.add_parser("run", help="there: the chains inside the time; the archive into --out")
    r.add_argument("--out", required=True, help="where the archive and the summary go ($OUT)")
    r.add_argument("--chain", nargs="+", action="append", default=None, help="TABLE:SEED:ROWS calls run one after another")
    r.add_argument("--chains-file", default=None, help="more chains, one a line (`chains --write` makes it)")
    r.add_argument("--minutes", type=float, required=True, help="no row starts training after this many minutes (copies and ensembles still go through)")
    r.add_argument("--hard-minutes", type=float, required=True, help="processes still running then are stopped")
    r.add_argument("--workers", type=int, default=0, help="chains at once (default: all)")
    r.add_argument("--scale", default="short"); r.add_argument("--device", default="cuda", help="cuda (cpu: try it here at --scale tiny)")
    r.add_argument("--predictions", action="store_true", help="also OUT/gpu-predictions-K.tar.gz: this call's runs' dev predictions, in parts under 16 MiB (ensembles to combine later)")
    r.add_argument("--pack", default=str(ROOT/"gpu-pack")); r.add_argument("--results", default="/tmp/gpu-results/ablate")
    c = sub.add_parser("chains", help="here: what --plan --device cuda lists for --tables, as balanced chains for run")
    c.add_argument("--tables", required=True, help="table ids, e.g. 002-T2,004-T2"); c.add_argument("--chains", type=int, default=6)
    c.add_argument("--results", default=str(ROOT/"results"/"ablate")); c.add_argument("--scale", default="short")
    c.add_argument("--ensembles-there", action="store_true", help="keep each ensemble in its members' chain (no predictions to bring back)")
    c.add_argument("--budget", action="store_true", help="the budget question's rows (contradicted claims at twice the budget, scale short2x)")
    c.add_argument("--write", default=None, help="also write the chains into this file, one a line, for run --chains-file (e.g. gpu-pack/chains.txt)")
    l = sub.add_parser("land", help="here: the archive's new rows into results/ablate; tables written again")
    l.add_argument("archive"); l.add_argument("--predictions", nargs="*", default=None, help="gpu-predictions-K.tar.gz parts, if the run made them")
    l.add_argument("--results", default=str(ROOT/"results"/"ablate"))
    a = p.parse_args(argv)
    if a.what == "stage": stage(a.tables.split(","), Path(a.results), Path(a.pack), a.scale)
    elif a.what == "run": run(a)
    elif a.what == "chains":
        cs, after = chains(a.tables.split(","), Path(a.results), a.scale, a.chains, ensembles_there=a.ensembles_there, budget=a.budget)
        scale = "short2x" if a.budget else a.scale
        for cost, items in cs: print(f"# cost {cost} (in plain 720-step runs): {' '.join(items)}")
        head = ("python3 tools/gpu_tables.py run --out $OUT --minutes 7 --hard-minutes 9" + ("" if scale == "short" else f" --scale {scale}")
                + (" --predictions" if after else ""))
        if cs and a.write:
            w = Path(a.write); w.parent.mkdir(parents=True, exist_ok=True)
            w.write_text("".join(" ".join(items) + "\n" for _, items in cs))
            rel = w.resolve().relative_to(ROOT) if w.resolve().is_relative_to(ROOT) else w
            print(f"{head} --chains-file {rel}")
        else: print(f"{head} " + " ".join(f"--chain {' '.join(items)}" for _, items in cs) if cs else "nothing left to train on cuda for these tables")
        if after: print("# then here, after `land` with the prediction parts (run --predictions), the ensembles:\n" + "\n".join(
            f"minbert_ablate --table {t} --scale {scale} --seeds {s} --rows {r} --out {Path(a.results)/f'{t}-{scale}'}" for t, s, r in (x.split(":") for x in after)))
    else: land(Path(a.archive), Path(a.results), [Path(x) for x in a.predictions or []])

if __name__ == "__main__": main()
