"""Loaded by `make nbs` only (PYTHONPATH=tools/nbs_site): temporary file names drawn from a fixed seed in every process, so
that a notebook's stored outputs name the same scratch folders each time it is re-run (its TMPDIR is fixed too, per notebook)
and a re-run's diff shows what changed, not new random names. Names stay unique within a process (one stream), and
`tempfile` tries the next name where one is taken (another process drew the same)."""
import os, random, tempfile

class _SeededNames(tempfile._RandomNameSequence):
    "tempfile's name sequence, seeded alike in each process (the stdlib's draws a fresh random seed per process)"
    @property
    def rng(self):
        if getattr(self, "_seeded_pid", None) != os.getpid(): self._seeded_pid, self._seeded = os.getpid(), random.Random(0)
        return self._seeded

tempfile._name_sequence = _SeededNames()
