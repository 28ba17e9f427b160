"""Nothing a user has is lost: output folders that are new or the command's own (export, train, ensemble, ablate), one
process per run folder, failed starts that leave nothing, leftovers of a killed write removed, honest exit codes, and one
line (not a traceback) for a damaged or mismatched run folder, a full disk or a folder that cannot be written"""
import json, os, re, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest, torch
from minbert_nb.checkpoint import atomic_save, load_checkpoint, TrainingInterrupted
from minbert_nb.config import config_from_args, preset_config
from minbert_nb.folders import (FolderRefused, LOCK, MARKER, OutputFolder, check_new_folder, folder_kind, held, lock_folder,
                                unlock_folder)
from minbert_nb.train import train
from datapaths import tiny_backbone_dir

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TIMEOUT = 600   # against hangs only: a loaded 2-core machine can take minutes for a tiny run
COMMANDS = dict(train="minbert_nb.commands:minbert_train", eval="minbert_nb.commands:minbert_eval",
                predict="minbert_nb.commands:minbert_predict", export="minbert_nb.export:minbert_export",
                ensemble="minbert_nb.ensemble:minbert_ensemble", ablate="minbert_nb.reproduce:minbert_ablate")


def _cmd(name, *args):
    mod, fn = COMMANDS[name].split(":")
    return [sys.executable, "-c", f"from {mod} import {fn}; {fn}()", *map(str, args)]

def _run(name, *args):
    """Run a command in this process, as its console script would: (exit status, everything it printed). A message given to
    `sys.exit` is printed as Python prints it at exit; an exception the command lets through becomes a traceback"""
    import contextlib, importlib, io, traceback
    mod, fn = COMMANDS[name].split(":")
    buf, rc = io.StringIO(), 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try: getattr(importlib.import_module(mod), fn)([str(a) for a in args])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) or e.code is None else 1
            if not isinstance(e.code, int) and e.code is not None: print(e.code, file=buf)
        except Exception: rc = 1; traceback.print_exc(file=buf)
    return rc or 0, buf.getvalue()

def _one_line_refusal(rc, out, *words):
    assert rc not in (0, None) and "Traceback" not in out, out
    said = re.findall(r"(minbert_\w+: .*)", out.replace("\r", "\n"))   # the command's message (after a progress bar, maybe)
    assert said, out
    last = said[-1]
    for w in words: assert w in last, (w, last)
    return last

def _tiny(out, data, *more):
    return ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--out", str(out), "--data_dir", str(data), "--epochs", "1", "--steps_per_epoch", "3",
            "--batch_size", "4", "--train_limit", "40", "--dev_limit", "24", "--eval_batch_size", "24", "--predict_test", "false", *more]

def _snapshot(folder):
    "Every file under `folder` with its bytes: to show that nothing in it changed"
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(Path(folder).rglob("*")) if f.is_file()}


@pytest.fixture(scope="module")
def run(module_tmp, small_data):
    "A finished tiny run (best.pt kept) in a folder of runs, beside an unrelated folder of the user's"
    root = module_tmp("folders")
    cfg = config_from_args(_tiny(root/"runs"/"a", small_data))
    train(cfg, progress=False)
    (root/"runs"/"notes.txt").write_text("my notes")
    return root/"runs"/"a"

def _copy_run(run, dest, keep_pt=True):
    shutil.copytree(run, dest, ignore=None if keep_pt else shutil.ignore_patterns("*.pt"))
    return dest


# --- 1. no command deletes what it did not make -------------------------------------------------------------------------

def test_export_overwrite_never_deletes_the_run_or_its_folder(run, tmp_path):
    runs = _copy_run(run, tmp_path/"runs"/"a").parent
    (runs/"b").mkdir(); (runs/"b"/"config.json").write_text("{}"); (runs/"b"/"metrics.json").write_text("{}")
    (runs/"notes.txt").write_text("my notes")
    (tmp_path/"photos").mkdir(); (tmp_path/"photos"/"cat.jpg").write_bytes(b"\xff\xd8")
    before = {p: _snapshot(p) for p in (runs, tmp_path/"photos")}
    for out, words in ((runs/"a", ["is the run being exported"]), (runs, ["holds it"]),
                       (tmp_path/"photos", ["did not write (cat.jpg)", "--overwrite replaces only"])):
        _one_line_refusal(*_run("export", runs/"a", out, "--overwrite", "--verify", "false"), *words)
    assert {p: _snapshot(p) for p in before} == before
    rc, out = _run("export", runs/"a", tmp_path/"hf", "--verify", "false"); assert rc == 0, out
    _one_line_refusal(*_run("export", runs/"a", tmp_path/"hf", "--verify", "false"), "pass --overwrite")
    (tmp_path/"hf"/"stale.txt").write_text("from the earlier export")
    rc, out = _run("export", runs/"a", tmp_path/"hf", "--overwrite", "--verify", "false"); assert rc == 0, out   # its own export: replaced
    assert not (tmp_path/"hf"/"stale.txt").exists() and (tmp_path/"hf"/"minbert_export.json").is_file()


def test_train_refuses_a_used_folder_before_writing(run, tmp_path, small_data):
    "A finished run (here without checkpoints, as committed runs are), the folder of runs, a user's folder: refused, unchanged"
    done = _copy_run(run, tmp_path/"runs"/"done", keep_pt=False)
    (tmp_path/"photos").mkdir(); (tmp_path/"photos"/"cat.jpg").write_bytes(b"\xff\xd8")
    before = _snapshot(tmp_path)
    for out, words in ((done, ["holds a finished training run", "never overwritten"]),
                       (tmp_path/"runs", ["holds folders that minbert_nb commands made (done)"]),
                       (tmp_path/"photos", ["did not write (cat.jpg)"])):
        _one_line_refusal(*_run("train", *_tiny(out, small_data, "--lr_heads", "0.5", "--seed", "1")), *words)
    # a setting that only failed late used to write its config.json beside the old metrics.json
    rc, out = _run("train", *_tiny(done, small_data, "--schedule", "bogus"))
    assert rc != 0 and "Traceback" not in out
    assert _snapshot(tmp_path) == before


def test_a_failed_start_leaves_nothing(tmp_path, small_data):
    empty = tmp_path/"no-data"; empty.mkdir()
    out = tmp_path/"new"/"run"
    with pytest.raises(Exception): train(config_from_args(_tiny(out, empty)), progress=False)
    assert not (tmp_path/"new").exists()                     # the folders it made are gone again
    keep = tmp_path/"mine"; keep.mkdir()                     # an empty folder of the user's stays, empty
    with pytest.raises(Exception): train(config_from_args(_tiny(keep, empty)), progress=False)
    assert keep.is_dir() and not any(keep.iterdir())


def test_ensemble_out_is_new_or_an_ensemble(run, tmp_path):
    runs = _copy_run(run, tmp_path/"runs"/"a").parent
    before = _snapshot(runs)
    _one_line_refusal(*_run("ensemble", runs/"a", runs/"a", "--out", runs), "holds folders that minbert_nb commands made")
    _one_line_refusal(*_run("ensemble", runs/"a", runs/"a", "--out", runs/"a"), "is one of the members")
    assert _snapshot(runs) == before
    rc, out = _run("ensemble", runs/"a", runs/"a", "--out", tmp_path/"ens"); assert rc == 0, out
    rc, out = _run("ensemble", runs/"a", runs/"a", "--out", tmp_path/"ens"); assert rc == 0, out   # its own folder: written again
    assert folder_kind(tmp_path/"ens") == "ensemble"


def test_ablate_out_must_be_new_or_its_table(tmp_path):
    (tmp_path/"photos").mkdir(); (tmp_path/"photos"/"cat.jpg").write_bytes(b"\xff\xd8")
    _one_line_refusal(*_run("ablate", "--table", "000-T10", "--scale", "tiny", "--rows", "1", "--out", tmp_path/"photos"),
                      "did not write (cat.jpg)")
    assert sorted(p.name for p in (tmp_path/"photos").iterdir()) == ["cat.jpg"]


# --- 2. a run folder belongs to one run --------------------------------------------------------------------------------

def test_a_second_training_into_the_same_folder_is_refused_at_once(tmp_path, small_data):
    out = tmp_path/"run"
    first = subprocess.Popen(_cmd("train", *_tiny(out, small_data, "--steps_per_epoch", "400", "--checkpoint_every", "1")),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    try:
        t = time.time()
        while not (out/"last.pt").exists():    # training (its lock taken long before): a SIGTERM now saves and stops it
            assert first.poll() is None and time.time() - t < TIMEOUT, first.stdout.read() if first.poll() is not None else "no lock"
            time.sleep(0.05)
        t = time.time()
        rc, msg = _run("train", *_tiny(out, small_data))
        last = _one_line_refusal(rc, msg, "in use by", f"PID {first.pid}")
        assert time.time() - t < 120, "refused, but not at once"
        rc, msg = _run("train", "--resume", out)                 # nor can a resume take it
        _one_line_refusal(rc, msg, "in use by", f"PID {first.pid}")
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=TIMEOUT)
    assert first.returncode == 143


def test_the_lock_of_a_dead_process_is_taken_over_with_a_notice(tmp_path, capsys):
    p = subprocess.Popen([sys.executable, "-c", f"from minbert_nb.folders import lock_folder; import time; lock_folder({str(tmp_path)!r}); "
                          "print('held', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True, env=ENV)
    assert p.stdout.readline().strip() == "held"
    with pytest.raises(FolderRefused, match=f"PID {p.pid}"): lock_folder(tmp_path)
    p.kill(); p.wait()
    lock_folder(tmp_path)
    try:
        said = capsys.readouterr().out
        assert held(tmp_path) and f"PID {p.pid}" in said and "no longer running" in said
    finally: unlock_folder(tmp_path)
    assert not (tmp_path/LOCK).exists()


# --- 5. exit codes that tell the truth ---------------------------------------------------------------------------------

@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_training_exits_128_plus_the_signal(tmp_path, small_data, sig, code):
    out = tmp_path/"run"
    p = subprocess.Popen(_cmd("train", *_tiny(out, small_data, "--steps_per_epoch", "400", "--checkpoint_every", "2")),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    t = time.time()
    while not (out/"last.pt").exists():
        assert p.poll() is None and time.time() - t < TIMEOUT, "no checkpoint"
        time.sleep(0.05)
    p.send_signal(sig)
    msg, _ = p.communicate(timeout=TIMEOUT)
    assert p.returncode == code, msg
    assert f"minbert_train --resume {out}" in msg and not (out/"metrics.json").exists()
    assert load_checkpoint(out/"last.pt")["progress"]["step"] >= 2


def test_help_states_the_exit_codes():
    rc, out = _run("train", "--help")
    assert rc == 0 and "130" in out and "143" in out


# --- 6. one line, not a traceback ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("body,words", [
    ('{"epochs": 1,\n "pooling": "mean",\n}', ["config.json:3: not valid JSON"]),
    ('["quick"]', ["config.json: expected a JSON object", "found a list"]),
    ('{"epochs": "three"}', ["config.json: field epochs='three' (str): expected int"]),
])
@pytest.mark.parametrize("cmd", ["eval", "predict"])
def test_a_damaged_config_json_is_named(run, tmp_path, body, words, cmd):
    r = _copy_run(run, tmp_path/"r")
    (r/"config.json").write_text(body)
    _one_line_refusal(*_run(cmd, r, *(["--splits", "dev"] if cmd == "predict" else [])), *words)


@pytest.mark.parametrize("field,value", [("head_layers", 2), ("pooling", "cls")])
def test_a_config_that_no_longer_fits_the_weights_is_named(run, tmp_path, field, value):
    "An edited head changes the weights' shapes; an edited pooling does not, and would silently compute something else"
    r = _copy_run(run, tmp_path/"r")
    c = json.loads((r/"config.json").read_text()); c[field] = value; (r/"config.json").write_text(json.dumps(c))
    _one_line_refusal(*_run("eval", r), "config.json describes another model than", "best.pt", field, "edited")


def test_eval_prints_its_scores_before_a_failed_write(run, tmp_path, small_data):
    r = _copy_run(run, tmp_path/"r")
    (r/"eval.json").mkdir()                                  # eval.json cannot be written (a folder is in its place)
    rc, out = _run("eval", r, "--data_dir", small_data)
    last = _one_line_refusal(rc, out, "the scores above were not saved", "eval.json")
    assert "overall=" in out.split(last)[0]


def test_predict_refuses_unknown_splits(run, tmp_path):
    _one_line_refusal(*_run("predict", _copy_run(run, tmp_path/"r"), "--splits", "bogus"), "--splits 'bogus'", "dev, test")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device whose writes fail with 'no space left'")
def test_a_full_disk_says_so_and_keeps_the_previous_checkpoint(tmp_path):
    ck = atomic_save({"w": torch.arange(3)}, tmp_path/"last.pt")
    (tmp_path/f".last.pt.tmp-{os.getpid()}").symlink_to("/dev/full")   # the next write's temporary file: every write fails
    with pytest.raises(OSError) as e: atomic_save({"w": torch.zeros(100_000)}, ck)
    msg = str(e.value)
    assert msg.startswith("no space left on device: writing") and str(ck) in msg and "previous last.pt is intact" in msg and "\n" not in msg
    assert torch.equal(load_checkpoint(ck)["w"], torch.arange(3)) and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


# --- 7. leftovers of a killed write -------------------------------------------------------------------------------------

def test_a_killed_writes_leftovers_are_removed_at_resume(tmp_path, small_data, capsys):
    cfg = config_from_args(_tiny(tmp_path/"run", small_data, "--steps_per_epoch", "6", "--checkpoint_every", "1"))
    with pytest.raises(TrainingInterrupted): train(cfg, progress=False, on_step=lambda info: info["step"] >= 2)
    orphan = tmp_path/"run"/".last.pt.tmp-4194000"            # what a SIGKILL in the middle of atomic_save leaves
    orphan.write_bytes(b"\0" * 4096)
    capsys.readouterr()
    m = train(cfg, progress=False, resume=True)
    assert not orphan.exists() and "removed 1 leftover" in capsys.readouterr().out and "overall" in m
    assert not (tmp_path/"run"/LOCK).exists()                  # the lock is given back at the end


def test_a_table_row_in_use_by_another_process_is_refused(tmp_path):
    from minbert_nb.ablate import TABLES, row_dir, _check_out
    t = TABLES["000-T10"]; folder = row_dir(tmp_path/"t", t, t.rows[0])
    _check_out(tmp_path/"t", dict(table=t.id, scale="tiny", backbone=None))   # the table folder, as the first process started it
    p = subprocess.Popen([sys.executable, "-c", f"from minbert_nb.folders import lock_folder; import time; "
                          f"lock_folder({str(folder)!r}, lock={str(folder.parent/f'.{folder.name}.lock')!r}); print('held', flush=True); time.sleep(600)"],
                         stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert p.stdout.readline().strip() == "held"
        _one_line_refusal(*_run("ablate", "--table", "000-T10", "--scale", "tiny", "--rows", "1", "--out", tmp_path/"t"), "in use by", f"PID {p.pid}")
    finally: p.kill(); p.wait()
