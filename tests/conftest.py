import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MINBERT_DATA", ROOT.parent / "shared" / "data"))
SMALL_N = 60   # rows kept from each real data file by the `small_data` fixture

@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    "The first SMALL_N rows of every real data file, in the same layout: the whole pipeline runs in seconds"
    if not (DATA / "cs224n").is_dir(): pytest.skip(f"CS224N data not found at {DATA}")
    d = tmp_path_factory.mktemp("data")
    for sub in ("cs224n", "extra"):
        (d / sub).mkdir()
        for f in (DATA / sub).glob("*.csv"):
            (d / sub / f.name).write_text("".join(f.read_text().splitlines(keepends=True)[:SMALL_N + 1]))
    return d
