"""Many traces at once: finding them (:mod:`.discover`), a process pool over them
(:mod:`.pool`), runs of rank traces (:mod:`.run`) and the scan into a Parquet dataset
(:mod:`.scan`, with the rows in :mod:`.rows` and the dataset's files in :mod:`.dataset`).

This layer does the file system and processes; the analysis it runs on each trace, and the
cross-rank computation of a run, are :mod:`traceview.analysis`'s.
"""
