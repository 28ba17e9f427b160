"""Tests of minbert_nb.data: readers on the real CS224N files, bad input, batching, bucketing and `minbert_data` downloads.

The full data folder is $MINBERT_DATA or ../shared/data next to the repository; tests of facts of the full files are skipped
by name when it is absent, the others read the committed sample (tests/sample_data).
Downloads are tested against an HTTP server on 127.0.0.1 only, never the internet.
"""
import hashlib, http.server, os, subprocess, sys, threading, warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from minbert_nb.data import *
from minbert_nb.loaders import *
from minbert_nb.fetch import *

from datapaths import DATA, FULL_DATA, SAMPLE, needs_full_data, run_command

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tok():
    from minbert_nb.pretrained import load_tokenizer
    return load_tokenizer()


def quiet(f, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*a, **k)


# ---------------------------------------------------------------- real files

@needs_full_data("row counts of every CS224N file")
@pytest.mark.parametrize("task,split,n", [
    ("sst", "train", 8544), ("sst", "dev", 1101), ("sst", "test", 2210),
    ("sts", "train", 6040), ("sts", "dev", 863), ("sts", "test", 1725),
    ("para", "dev", 20214), ("para", "train", 19012),
    ("cfimdb", "train", 1707), ("cfimdb", "dev", 245), ("cfimdb", "test", 488)])
def test_row_counts(task, split, n):
    df = quiet(load_split, task, split, DATA)
    assert len(df) == n
    assert df.attrs["skipped"] == 0 and df.attrs["split"] == split
    assert df.id.is_unique and (df.sentence1.str.len() > 0).all()
    spec = TASKS[task]
    if split == "test": assert "label" not in df.columns
    else: assert df.label.dropna().between(spec.low, spec.high).all()


@needs_full_data("Quora dev's two unlabelled rows and the quora-extra training file")
def test_quora_files():
    fs = data_files(DATA)
    assert fs["para"]["train"].name == "quora-extra-train.csv" and fs["para"]["test"] is None
    with pytest.warns(UserWarning, match="2 row.s. without a label"):
        dev = load_split("para", "dev", DATA)
    assert str(dev.label.dtype) == "Int64" and dev.label.isna().sum() == 2
    assert [u["line"] for u in dev.attrs["unlabelled_rows"]] == [2577, 14222]
    scored = labelled_rows(dev)
    assert len(scored) == 20212 and scored.label.dtype == np.int64 and len(scored.attrs["excluded"]) == 2
    with pytest.raises(FileNotFoundError, match="not available offline"): load_split("para", "test", DATA)
    train = load_split("para", "train", DATA)
    assert train.label.dtype == np.int64 and abs(train.label.mean() - 0.5) < 0.01
    with pytest.raises(DataError, match=r"quora-dev.csv:2577: no label"):
        read_task_file(DATA/"cs224n/quora-dev.csv", "para")


def test_sst_test_student_header():
    df = read_task_file(SAMPLE/"cs224n/ids-sst-test-student.csv", "sst")  # header: 0<TAB><TAB>id<TAB>sentence
    assert list(df.columns) == ["id", "sentence1"] and df.id[0] == "b7573736a6ddf7be102b7fee0"


@needs_full_data("SICK 2014's 4,500 training pairs")
def test_sick():
    sick = read_sick(DATA/"extra/sick2014")
    assert len(sick) == 4500 and sick.id[0] == "sick-1"
    assert sick.label.min() >= 0 and sick.label.max() <= 5
    assert abs(float(sick.label[0]) - (4.5 - 1) * 5 / 4) < 1e-6
    raw = read_sick(DATA/"extra/sick2014/SICK_train.txt", scale="raw")
    assert raw.label.min() >= 1


def test_find_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MINBERT_DATA", str(tmp_path))
    assert find_data_dir() == tmp_path
    assert find_data_dir(tmp_path/"..") == tmp_path/".."
    with pytest.raises(FileNotFoundError, match="no such folder.*MINBERT_DATA"): find_data_dir(tmp_path/"nope")
    monkeypatch.setenv("MINBERT_DATA", str(tmp_path/"nope"))
    with pytest.raises(FileNotFoundError, match="MINBERT_DATA="): find_data_dir()


# ---------------------------------------------------------------- bad input

H = "\tid\tsentence\tsentiment\n"
OK = "0\ta1\tA fine film .\t3\n1\ta2\tDull .\t1\n"
BAD = [  # (name, body, line, reason)
    ("missing_col", "\tid\tsentence\n0\ta1\tFine .\n", 1, "missing column 'sentiment'"),
    ("bad_label", H + OK + "2\ta3\tMeh .\tgood\n", 4, "label 'good' is not one of the classes of task sst"),
    ("half_label", H + OK + "2\ta3\tMeh .\t2.5\n", 4, "label '2.5' is not a whole class number"),
    ("range", H + OK + "2\ta3\tMeh .\t7\n", 4, "label '7' is outside 0..4 for task sst"),
    ("no_label", H + OK + "2\ta3\tMeh .\t\n", 4, "no label (the label field is empty)"),
    ("empty", "", 1, "the file is empty"),
    ("blank", "\n\n  \n", 1, "the file is empty"),
    ("header_only", H, 2, "no data rows after the header"),
    ("comma", ",id,sentence,sentiment\n0,a1,Fine .,3\n", 1, "the header has no tab but has commas"),
    ("semicolon", ";id;sentence;sentiment\n0;a1;Fine .;3\n", 1, "but has semicolons"),
    ("dup", H + OK + "2\ta1\tAgain .\t2\n", 4, "duplicate id 'a1' (first on line 2)"),
    ("empty_sentence", H + OK + "2\ta3\t  \t2\n", 4, "empty sentence1"),
    ("empty_id", H + OK + "2\t\tHm .\t2\n", 4, "empty id"),
    ("latin1", (H + OK).encode() + "2\ta3\tCaf\xe9 .\t2\n".encode("latin-1"), 4, "byte 0xE9 in field 3 is not UTF-8"),
    ("header_latin1", b"\tid\tsent\xe9nce\tsentiment\n0\ta1\tFine .\t3\n", 1, "the header has bytes that are not UTF-8"),
    ("too_many", H + OK + "2\ta3\tToo\tmany\t2\n", 4, "5 fields but the header has 4"),
    ("too_few", H + OK + "2\ta3\t2\n", 4, "3 fields but the header has 4"),
    ("extra_col", "\tid\tsentence\tsentiment\tscore\n0\ta1\tFine .\t3\t9\n", 1, "unexpected column 'score'"),
    ("dup_col", "\tid\tsentence\tsentiment\tsentiment\n0\ta1\tFine .\t3\t3\n", 1, "column 'sentiment' appears twice"),
]

@pytest.mark.parametrize("name,body,line,reason", BAD, ids=[b[0] for b in BAD])
def test_bad_input(tmp_path, name, body, line, reason):
    p = tmp_path/f"{name}.csv"
    p.write_bytes(body if isinstance(body, bytes) else body.encode())
    with pytest.raises(DataError) as e: read_task_file(p, "sst", labelled=True)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: ") and reason in msg and "Expected" in msg, msg
    assert (e.value.path, e.value.line) == (str(p), line)


def test_bad_input_pair_and_sts(tmp_path):
    p = tmp_path/"sts.csv"
    p.write_text("\tid\tsentence1\tsentence2\tsimilarity\n0\tb1\tA cat .\tA dog .\t5.5\n")
    with pytest.raises(DataError, match=r"sts.csv:2: label '5.5' is outside 0..5 for task sts"): read_task_file(p, "sts")
    p.write_text("\tid\tsentence1\tsentence2\tis_duplicate\n0\tb1\tA cat ?\t\t1.0\n")
    with pytest.raises(DataError, match=r"sts.csv:2: empty sentence2"): read_task_file(p, "para")
    with pytest.raises(DataError, match="it looks like a file of task para or sts"): read_task_file(p, "sst")


def test_multiline_record_line_numbers(tmp_path):
    p = tmp_path/"ml.csv"
    p.write_text(H + '0\ta1\t"two\nlines"\t3\n1\ta2\tOk .\t9\n')
    with pytest.raises(DataError, match=r"ml.csv:4: label '9'"): read_task_file(p, "sst")


def test_skip_bad_rows(tmp_path):
    p = tmp_path/"mixed.csv"
    p.write_bytes((H + OK + "2\ta3\tMeh .\t7\n3\ta4\t\t2\n4\ta1\tDup .\t2\n").encode() + b"5\ta6\t\xff\t1\n6\ta7\tGood .\t4\n")
    with pytest.warns(UserWarning, match="skipped 4 bad row"):
        df = read_task_file(p, "sst", skip_bad_rows=True)
    assert len(df) == 3 and df.attrs["skipped"] == 4
    assert [r["line"] for r in df.attrs["skipped_rows"]] == [4, 5, 6, 7]
    assert df.id.tolist() == ["a1", "a2", "a7"] and df.label.tolist() == [3, 1, 4]
    p.write_text(H + "0\ta1\tMeh .\t7\n")
    with pytest.raises(DataError, match="all 1 data rows are bad"): read_task_file(p, "sst", skip_bad_rows=True)


def test_load_split_demands_labels(tmp_path):
    (tmp_path/"cs224n").mkdir()
    (tmp_path/"cs224n/ids-sst-train.csv").write_text("\tid\tsentence\n0\ta1\tFine .\n")
    with pytest.raises(DataError, match=r"ids-sst-train.csv:1: missing column 'sentiment'"): load_split("sst", "train", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"ids-sst-dev.csv: not found"): load_split("sst", "dev", tmp_path)
    with pytest.raises(FileNotFoundError, match="neither .*quora-train.csv nor .*quora-extra-train.csv"): load_split("para", "train", tmp_path)


def test_read_generic(tmp_path):
    p = tmp_path/"rt.csv"
    p.write_text('review,stars\n"Loved it, really",5\nBoring.,1\n')
    df = read_generic(p, "sst", {"sentence": "review", "label": "stars"}, label_transform=lambda s: s - 1, id_prefix="rt-")
    assert df.id.tolist() == ["rt-rt:2", "rt-rt:3"] and df.label.tolist() == [4, 0] and df.sentence1[0] == "Loved it, really"
    with pytest.raises(DataError, match=r"rt.csv:2: label '5' is outside 0..4"): read_generic(p, "sst", {"sentence": "review", "label": "stars"})
    with pytest.raises(DataError, match=r"rt.csv:1: missing column 'text'"): read_generic(p, "sst", {"sentence": "text"})
    with pytest.raises(DataError, match=r"rt.csv:1: the header has no tab but has commas"):
        read_generic(p, "sst", {"sentence": "review", "label": "stars"}, sep="\t")


# ---------------------------------------------------------------- batching

def test_collate_shapes(tok):
    sst = load_split("sst", "dev", SAMPLE).head(8)
    ds = TaskDataset(sst, "sst", tok)
    b = collate([ds[i] for i in range(5)], "sst")
    T = max(len(ds[i]["a"][0]) for i in range(5))
    assert b["a"]["input_ids"].shape == b["a"]["attention_mask"].shape == b["a"]["token_type_ids"].shape == (5, T)
    assert b["labels"].dtype == torch.long and b["labels"].tolist() == sst.label[:5].tolist()
    assert "b" not in b and b["n_tokens"] == int(ds.lengths[:5].sum()) and b["n_tokens"] + b["n_pad"] == 5 * T
    sts = load_split("sts", "dev", SAMPLE).head(6)
    bi, cross = TaskDataset(sts, "sts", tok), TaskDataset(sts, "sts", tok, pair_mode="cross")
    bb = collate([bi[i] for i in range(4)], "sts")
    assert bb["a"]["input_ids"].shape[0] == bb["b"]["input_ids"].shape[0] == 4 and bb["labels"].dtype == torch.float32
    assert bb["a"]["token_type_ids"].max() == 0 and bb["b"]["token_type_ids"].max() == 0
    bc = collate([cross[i] for i in range(4)], "sts")
    assert "b" not in bc and bc["a"]["input_ids"].shape[0] == 4 and bc["a"]["token_type_ids"].max() == 1
    ids = bc["a"]["input_ids"][0][bc["a"]["attention_mask"][0].bool()].tolist()
    assert ids[0] == tok.cls_token_id and ids.count(tok.sep_token_id) == 2
    test = TaskDataset(load_split("sst", "test", SAMPLE).head(3), "sst", tok)
    assert collate([test[0], test[1]], "sst")["labels"] is None


def test_collate_missing_labels():
    a = ([101, 7, 102], [0, 0, 0])
    items = [dict(id="x", label=1, a=a, b=a), dict(id="y", label=None, a=a, b=([101, 102], [0, 0]))]
    b = collate(items, "para")
    assert b["labels"].tolist() == [1, IGNORE_INDEX] and b["label_mask"].tolist() == [True, False]
    assert b["b"]["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]] and b["n_pad"] == 1
    s = collate([dict(id="x", label=None, a=a, b=a), dict(id="y", label=2.5, a=a, b=a)], "sts")
    assert torch.isnan(s["labels"][0]) and s["labels"][1] == 2.5 and s["label_mask"].tolist() == [False, True]


def test_bucket_sampler():
    lens = np.random.default_rng(0).integers(1, 80, 1003)
    s = BucketBatchSampler(lens, 16, seed=3, bucket_size_multiplier=5)
    for epoch in range(3):
        s.set_epoch(epoch)
        e = list(s)
        assert sorted(i for b in e for i in b) == list(range(1003)) and len(e) == len(s) == 63
    s.set_epoch(1); e1 = list(s)
    s2 = BucketBatchSampler(lens, 16, seed=3, bucket_size_multiplier=5); s2.set_epoch(1)
    assert list(s2) == e1                                       # reproducible per (seed, epoch)
    s2.set_epoch(2); assert list(s2) != e1
    assert list(BucketBatchSampler(lens, 16, seed=4, bucket_size_multiplier=5)) != list(BucketBatchSampler(lens, 16, seed=3, bucket_size_multiplier=5))
    d = BucketBatchSampler(lens, 16, drop_last=True)
    assert len(d) == len(list(d)) == 62 and all(len(b) == 16 for b in d)


def test_padding_fraction_lower_with_bucketing(tok):
    ds = TaskDataset(load_split("sst", "train", SAMPLE), "sst", tok)
    rnd = padding_fraction(make_loader(ds, 32, shuffle=True))
    bkt = padding_fraction(make_loader(ds, 32, shuffle=True, bucket=True))
    assert bkt < rnd / 3, (rnd, bkt)
    dl = make_loader(ds, 32, shuffle=True, bucket=True, seed=1)
    dl.batch_sampler.set_epoch(2); first = next(iter(dl))["ids"]
    dl.batch_sampler.set_epoch(2); assert next(iter(dl))["ids"] == first


# ---------------------------------------------------------------- downloads (loopback only)

BODY = b"\tid\tsentence\tsentiment\n0\ta1\tA fine film .\t3\n" * 200
QUORA = (SAMPLE/"cs224n/quora-dev.csv").read_bytes()        # 300 pairs in the Quora layout, served as quora-train.csv
PIN = {"ids-sst-dev.csv": hashlib.sha256(BODY).hexdigest()}

@pytest.fixture()
def server():
    "Serves BODY as /good/NAME, with one byte changed as /corrupt/NAME, cut short (full Content-Length) as /truncated/NAME"
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            mode, _, name = self.path.strip("/").partition("/")
            if name not in ("ids-sst-dev.csv", "quora-train.csv"): return self.send_error(404)
            body = QUORA if name == "quora-train.csv" else BODY
            if mode == "corrupt": body = body[:50] + b"X" + body[51:]
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body[:len(body) // 3] if mode == "truncated" else body)
            self.close_connection = True
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown(); srv.server_close()


def leftovers(out): return sorted(p.name for p in Path(out).rglob("*") if p.is_file())

def test_download_good_and_repeat(tmp_path, server):
    r = fetch_cs224n(tmp_path, f"{server}/good/", files=PIN, timeout=5)
    assert r == {"ids-sst-dev.csv": "downloaded, SHA-256 verified"}
    assert (tmp_path/"cs224n/ids-sst-dev.csv").read_bytes() == BODY
    assert fetch_cs224n(tmp_path, f"{server}/good/", files=PIN, timeout=5) == {"ids-sst-dev.csv": "ok (already present, SHA-256 verified)"}
    assert fetch_cs224n(tmp_path, f"{server}/corrupt/", files=PIN, timeout=5)["ids-sst-dev.csv"].startswith("ok")  # not re-fetched
    assert leftovers(tmp_path) == ["ids-sst-dev.csv"]


def test_download_corrupted_rejected(tmp_path, server):
    r = fetch_cs224n(tmp_path, f"{server}/corrupt/", files=PIN, timeout=5)["ids-sst-dev.csv"]
    assert r.startswith("FAILED") and "SHA-256 mismatch" in r
    assert leftovers(tmp_path) == []


def test_download_truncated_rejected(tmp_path, server):
    r = fetch_cs224n(tmp_path, f"{server}/truncated/", files=PIN, timeout=5)["ids-sst-dev.csv"]
    assert r.startswith("FAILED") and "truncated download" in r
    assert leftovers(tmp_path) == []
    with pytest.raises(DownloadError, match="truncated"):                    # also without a pin: length is checked
        download_file(f"{server}/truncated/ids-sst-dev.csv", tmp_path/"x.csv", timeout=5)
    assert leftovers(tmp_path) == []


def test_download_replaces_damaged_and_cleans_partials(tmp_path, server):
    (tmp_path/"cs224n").mkdir()
    (tmp_path/"cs224n/ids-sst-dev.csv").write_bytes(BODY[:100])                # an earlier truncated copy
    (tmp_path/"cs224n/.ids-sst-dev.csv.abc123.part").write_bytes(b"half")      # left by a killed run
    assert verify_cs224n(tmp_path, PIN) == {"ids-sst-dev.csv": "CORRUPTED (SHA-256 mismatch)"}
    r = fetch_cs224n(tmp_path, f"{server}/good/", files=PIN, timeout=5)
    assert r["ids-sst-dev.csv"] == "removed a corrupted copy; downloaded, SHA-256 verified"
    assert leftovers(tmp_path) == ["ids-sst-dev.csv"]


def test_download_unpinned_needs_flag(tmp_path, server):
    r = fetch_cs224n(tmp_path, f"{server}/good/", files={}, timeout=5)
    assert r == {}
    r = fetch_cs224n(tmp_path, f"{server}/good/", files={}, unverified=True, timeout=5)   # no pin: layout and row count instead
    assert r["quora-train.csv"].startswith("FAILED") and "300 data rows. Expected 141,498 to 141,506 rows" in r["quora-train.csv"]
    assert r["quora-test-student.csv"].startswith("FAILED") and "HTTP 404" in r["quora-test-student.csv"]
    assert leftovers(tmp_path) == []                                            # the wrong file was not kept


def test_download_unpinned_checked_by_rows_and_layout(tmp_path, server, monkeypatch):
    import minbert_nb.fetch as D
    monkeypatch.setitem(D.UNPINNED_CHECKS, "quora-train.csv", dict(task="para", labelled=True, rows=(300, 300)))
    r = fetch_cs224n(tmp_path, f"{server}/good/", files={"quora-train.csv": None}, timeout=5)
    assert r == {"quora-train.csv": "downloaded, 300 rows, layout verified (no pinned SHA-256)"}
    assert verify_cs224n(tmp_path, {"quora-train.csv": None}) == {"quora-train.csv": "ok (300 rows, layout verified (no pinned SHA-256))"}
    (tmp_path/"cs224n/quora-train.csv").write_bytes(BODY)                       # SST rows under Quora's name
    assert verify_cs224n(tmp_path, {"quora-train.csv": None})["quora-train.csv"].startswith("CORRUPTED (")


def test_ensure_data_fetches_what_a_run_lacks(tmp_path, server, monkeypatch):
    import minbert_nb.fetch as D
    monkeypatch.setitem(D.UNPINNED_CHECKS, "quora-train.csv", dict(task="para", labelled=True, rows=(300, 300)))
    d = tmp_path/"data"; (d/"cs224n").mkdir(parents=True)
    for f in ("ids-sst-train.csv", "ids-sst-dev.csv", "quora-dev.csv"): (d/"cs224n"/f).write_bytes((SAMPLE/"cs224n"/f).read_bytes())
    assert missing_files(d, ("sst", "para")) == ["quora-train.csv"]
    assert ensure_data(d, ("sst", "para"), base_url=f"{server}/good/", timeout=5) == d
    assert missing_files(d, ("sst", "para")) == [] and (d/"cs224n/quora-train.csv").read_bytes() == QUORA
    monkeypatch.setenv("MINBERT_DATA", str(tmp_path/"elsewhere"))             # no folder yet: it is created and filled
    with pytest.raises(FileNotFoundError, match="the training data is missing: ids-sst-train.csv.*the download failed"):
        ensure_data(None, ("sst",), base_url=f"{server}/good/", timeout=5)   # the server has no SST train file (404)


def test_download_unreachable(tmp_path):
    import socket
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]   # nothing listens there
    r = fetch_cs224n(tmp_path/"new", f"http://127.0.0.1:{port}/", files={"a.csv": None, "b.csv": None}, timeout=5)
    assert "cannot reach the server" in r["a.csv"] and r["b.csv"].startswith("FAILED: not tried")
    assert not (tmp_path/"new").exists()


def _cli(args, env=None):
    "`minbert_data ARGS` as its console-script wrapper runs it, in this process (`run_command`)"
    return run_command(minbert_data, *args, env=env)

def test_cli(tmp_path, server):
    h = _cli(["--help"])
    assert h.returncode == 0 and "--base-url" in h.stdout and "pinned SHA-256" in h.stdout
    out = tmp_path/"data"
    # the real pins against a server that only has our test body: every file fails, exit status 1, nothing left behind
    r = _cli(["--out", str(out), "--base-url", f"{server}/good/", "--timeout", "5"])
    assert r.returncode == 1 and "SHA-256 mismatch" in r.stdout and "not ready" in r.stderr
    assert not out.exists() or leftovers(out) == []
    a = minbert_data.parser().parse_args(["--base_url", "u", "--out", "o"])      # the snake_case flags of minbert_train too
    assert (a.base_url, a.out) == ("u", "o") and "--base_url" in h.stdout
    if FULL_DATA:
        r = _cli(["--check"], env={"MINBERT_DATA": str(DATA)})
        assert r.returncode == 0 and "data folder ready" in r.stdout and "CORRUPTED" not in r.stdout
