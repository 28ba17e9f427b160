"""Loaded by `make nbs` only (PYTHONPATH=tools/nbs_site): temporary file names drawn from fixed seeds in every process, so
that a notebook's stored outputs name the same scratch folders each time it is re-run (its TMPDIR is fixed too, per notebook)
and a re-run's diff shows what changed, not new random names.

One stream per folder: the names drawn for a folder depend only on the names drawn for that folder before. A single
stream for the process shifted every later scratch name whenever some other folder took a name once and not at the next
re-run (the data cache writes its file through `mkstemp` in its own folder on a miss only), and a notebook's re-save then
changed every path it prints. Names stay unique within a folder (one stream each), and `tempfile` tries the next name
where one is taken (another process drew the same)."""
import os, random, tempfile, threading, zlib

_folder = threading.local()            # the folder the names being drawn now are for (set per call, per thread)
_sanitize = tempfile._sanitize_params

def _sanitize_params(prefix, suffix, dir):
    "tempfile's own, noting the folder: every call that draws names (mkstemp, mkdtemp, NamedTemporaryFile, ...) goes through it"
    out = _sanitize(prefix, suffix, dir)
    _folder.path = os.path.abspath(os.fsdecode(out[2]))
    return out

class _SeededNames(tempfile._RandomNameSequence):
    "tempfile's name sequence, one stream per folder, seeded by the folder's path alike in each process (the stdlib's: one per process, a fresh random seed)"
    @property
    def rng(self):
        if getattr(self, "_seeded_pid", None) != os.getpid(): self._seeded_pid, self._streams = os.getpid(), {}
        where = getattr(_folder, "path", "")
        if where not in self._streams: self._streams[where] = random.Random(zlib.crc32(where.encode()))
        return self._streams[where]

tempfile._sanitize_params = _sanitize_params
tempfile._name_sequence = _SeededNames()
