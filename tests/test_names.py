"""Every name the package, the tools and the tests use is defined somewhere: pyflakes reads each file. A name only a CUDA
branch reaches (`check_ceilings` once called a function it never imported) would otherwise fail first on a GPU"""
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

def _undefined(paths) -> list:
    from pyflakes import api, messages, reporter
    found = []
    class Keep(reporter.Reporter):
        def __init__(self): pass
        def flake(self, m):
            if isinstance(m, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)): found.append(str(m))
        def syntaxError(self, filename, msg, lineno, offset, text): found.append(f"{filename}:{lineno}: {msg}")
        def unexpectedError(self, filename, msg): found.append(f"{filename}: {msg}")
    for p in paths: api.checkPath(str(p), Keep())
    return found

def test_no_undefined_names():
    files = [*ROOT.glob("minbert_nb/*.py"), *ROOT.glob("tools/*.py"), *ROOT.glob("tests/**/*.py"), ROOT / "conftest.py"]
    assert len(files) > 50
    assert _undefined(files) == []

def test_the_check_finds_one(tmp_path):
    f = tmp_path / "m.py"; f.write_text("def f(c):\n    return peak(c) if c else None\n")
    assert [m.split(": ", 1)[1] for m in _undefined([f])] == ["undefined name 'peak'"]
