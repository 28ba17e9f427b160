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
