"Where the tests find data: the full CS224N files when present, else the committed sample"
import os
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
# The full data: $MINBERT_DATA, else ../shared/data beside the repository. CI runs the suite both with it and with
# MINBERT_DATA pointing at an empty folder; tests that need the full files are then skipped, each saying so by name.
DATA = Path(os.environ.get("MINBERT_DATA") or ROOT.parent / "shared" / "data")
FULL_DATA = (DATA / "cs224n" / "ids-sst-train.csv").is_file()
SAMPLE = ROOT / "tests" / "sample_data"   # the committed sample (tests/sample_data/README.md): every other test uses it

def needs_full_data(what: str):
    "Skip marker for a test that checks facts of the full CS224N files (row counts, hashes, known bad rows)"
    return pytest.mark.skipif(not FULL_DATA, reason=f"needs the full CS224N data ({what}); not found at {DATA}: "
                                                    "set MINBERT_DATA or run `minbert_data --out DIR`")


def tiny_backbone_dir() -> str:
    """A tiny random BERT (2 layers of width 32, the embedded backbone's tokenizer) made once per test process: for the
    trainings of tests that check plumbing (resume, stops, transforms, folders), not scores. Training MiniLM there cost
    minutes per test; the same code paths run on this model in seconds."""
    global _TINY
    if _TINY is None:
        import atexit, shutil, tempfile
        from minbert_nb.pretrained import tiny_backbone
        d = tempfile.mkdtemp(prefix="minbert-test-tiny-bert-"); atexit.register(shutil.rmtree, d, True)
        _TINY = str(tiny_backbone(Path(d) / "tiny-bert"))
    return _TINY

_TINY = None
