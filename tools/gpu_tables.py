"""Run report tables on a lent GPU machine inside a fixed time, and bring the finished run folders back in one archive.

The device tool gives a session minutes of one GPU, one command at a time, and takes back at most 8 files from $OUT. This
runs `minbert_ablate` calls as chains (each chain's calls one after another: a table whose rows copy a twin's run, or an
ensemble of its members, follows them), several chains at once on the one GPU, each process with its share of the cores;
no row starts after `--train-minutes` (`--until`), processes still running at `--hard-minutes` are stopped (that row is
lost; the others stay), and every 45 s and at the end the run folders (no checkpoints, no prediction files: the ensembles
read them there) and the logs go into OUT/gpu-runs.tar.gz, beside OUT/gpu-tables.json (what ran, how long, GPU busy).

    python3 tools/gpu_tables.py --out $OUT --train-minutes 7 --hard-minutes 9 \\
        --chain 004-T4:0:1,2,3,4,5,6 004-T3:0:6,7,8,9,10 --chain 004-T3:0:1,2,3,4,5 ...

A chain is `TABLE:SEED:ROWS` calls, space-separated; `--chain` again for another. Needs tools/pack_gpu.py's pack (gpu-pack/).
Here, `tar xzf gpu-runs.tar.gz -C results/ablate` puts the tables beside the CPU ones (their own folders: a seed's rows
never mix devices, which run_table checks).
"""
import argparse, json, os, signal, subprocess, sys, tarfile, threading, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/"tools"))

def _pack(results:Path, logs:Path, dest:Path):
    "results' table folders (no *.pt, no predictions) and the logs as dest (written aside, then moved in)"
    tmp = dest.with_name(dest.name + ".part")
    skip = lambda ti: None if ti.name.endswith(".pt") or "/predictions" in ti.name or "/." in ti.name else ti
    with tarfile.open(tmp, "w:gz") as t:
        for d in sorted(results.iterdir()) if results.is_dir() else []: t.add(d, arcname=d.name, filter=skip)
        if logs.is_dir(): t.add(logs, arcname="gpu-logs")
    os.replace(tmp, dest)

def _smi(dest:Path, stop:threading.Event):
    "GPU busy % and memory every 2 s into dest (CSV)"
    with open(dest, "w") as f:
        f.write("t,util_pct,mem_mib\n")
        t0 = time.time()
        while not stop.wait(2):
            try: r = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                                    capture_output=True, text=True, timeout=10).stdout.strip().split("\n")[0]
            except (OSError, subprocess.SubprocessError): continue
            f.write(f"{time.time() - t0:.0f},{r.replace(' ', '')}\n"); f.flush()

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="where the archive and the summary go ($OUT)")
    p.add_argument("--chain", nargs="+", action="append", required=True, help="TABLE:SEED:ROWS calls run one after another")
    p.add_argument("--train-minutes", type=float, required=True, help="no row starts after this many minutes")
    p.add_argument("--hard-minutes", type=float, required=True, help="processes still running then are stopped")
    p.add_argument("--workers", type=int, default=0, help="chains at once (default: all)")
    p.add_argument("--scale", default="short")
    p.add_argument("--device", default="cuda", help="cuda (cpu: try the script here on --scale tiny)")
    p.add_argument("--pack", default=str(ROOT/"gpu-pack"))
    p.add_argument("--results", default="/tmp/gpu-results/ablate")
    a = p.parse_args(argv)
    t0 = time.time(); until, hard = t0 + 60 * a.train_minutes, t0 + 60 * a.hard_minutes
    out, results, logs = Path(a.out), Path(a.results), Path(a.results).parent/"logs"
    out.mkdir(parents=True, exist_ok=True); results.mkdir(parents=True, exist_ok=True); logs.mkdir(parents=True, exist_ok=True)
    from pack_gpu import unpack
    site, data = unpack(Path(a.pack))
    chains = [[c.split(":") for c in ch] for ch in a.chain]
    workers = a.workers or len(chains)
    cores = len(os.sched_getaffinity(0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]), "MINBERT_DATA": str(data), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": str(max(1, cores // workers)), "MINBERT_CACHE": "/tmp/minbert-cache"}
    print(f"unpacked in {time.time() - t0:.0f} s; {len(chains)} chains, {workers} at a time, {env['OMP_NUM_THREADS']} threads each; "
          f"no row after {a.train_minutes} min, stop at {a.hard_minutes} min", flush=True)
    stop = threading.Event(); smi = threading.Thread(target=_smi, args=(out/"gpu-util.csv", stop), daemon=True); smi.start()
    calls, lock, procs = [], threading.Lock(), set()
    def chain(cs):
        for table, seed, rows in cs:
            if time.time() >= until: break
            log = logs/f"{table}-seed{seed}-rows{rows.replace(',', '_')}.log"
            cmd = [sys.executable, "-m", "minbert_nb.reproduce", "--table", table, "--scale", a.scale, "--seeds", seed, "--rows", rows,
                   "--out", str(results/f"{table}-{a.scale}"), "--device", a.device, "--quiet", "--until", str(until)]
            rec = dict(table=table, seed=int(seed), rows=rows, start_s=round(time.time() - t0, 1))
            with open(log, "w") as f:
                pr = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
                with lock: procs.add(pr)
                rc = pr.wait()
                with lock: procs.discard(pr)
            rec.update(end_s=round(time.time() - t0, 1), rc=rc)
            with lock: calls.append(rec)
            print(f"[{rec['end_s']:6.0f} s] {table} seed {seed} rows {rows}: rc {rc} ({rec['end_s'] - rec['start_s']:.0f} s)", flush=True)
            if rc: print(log.read_text()[-3000:], flush=True)
    pending, running = list(chains), []
    last_pack = time.time()
    while pending or any(t.is_alive() for t in running):
        running = [t for t in running if t.is_alive()]
        while pending and len(running) < workers and time.time() < until:
            t = threading.Thread(target=chain, args=(pending.pop(0),), daemon=True); t.start(); running.append(t)
        if time.time() >= until: pending = []
        if time.time() >= hard:
            with lock:
                for pr in procs:
                    try: os.killpg(pr.pid, signal.SIGKILL)
                    except OSError: pass
            print(f"[{time.time() - t0:6.0f} s] hard stop: {len(procs)} process(es) stopped", flush=True)
            time.sleep(2); break
        if time.time() - last_pack > 45: _pack(results, logs, out/"gpu-runs.tar.gz"); last_pack = time.time()
        time.sleep(1)
    stop.set()
    rows = [json.loads(f.read_text()) for f in sorted(results.rglob("row.json"))]
    summary = dict(wall_s=round(time.time() - t0, 1), workers=workers, threads=env["OMP_NUM_THREADS"], calls=calls,
                   rows=[dict(table=r["table"], row=r["row"], folder=str(Path(r["folder"]).relative_to(results)), status=r["status"],
                              wall_s=round(r.get("wall_s") or 0, 1), overall=r.get("metrics", {}).get("overall"),
                              device=r.get("metrics", {}).get("device")) for r in rows])
    (out/"gpu-tables.json").write_text(json.dumps(summary, indent=1))
    _pack(results, logs, out/"gpu-runs.tar.gz")
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"done in {summary['wall_s']:.0f} s: {ok} rows ok of {len(rows)} row.json; archive {(out/'gpu-runs.tar.gz').stat().st_size / 2**20:.1f} MB")

if __name__ == "__main__": main()
