import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
from datapaths import SAMPLE

SMALL_N = 60   # rows kept from each sample file by the `small_data` fixture

@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    "The first SMALL_N rows of every sample data file, in the same layout: the whole pipeline runs in seconds, on any machine"
    d = tmp_path_factory.mktemp("data")
    for sub in ("cs224n", "extra"):
        (d / sub).mkdir()
        for f in (SAMPLE / sub).glob("*.csv"):
            (d / sub / f.name).write_text("".join(f.read_text().splitlines(keepends=True)[:SMALL_N + 1]))
    return d


def pytest_collection_modifyitems(config, items):
    """`make test-nodata` (MINBERT_NODATA_PASS=1) is CI's second pass, with the data lookup pointed at an empty folder. Tests
    that read only the committed sample (the `small_data` fixture) read the same files in both passes, so this pass leaves
    them out; everything that looks data up (the notebooks, tests/test_data.py, the benchmark's sentences, the commands'
    messages) runs again."""
    if os.environ.get("MINBERT_NODATA_PASS") != "1": return
    drop = [it for it in items if "small_data" in getattr(it, "fixturenames", ())]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [it for it in items if it not in drop]
