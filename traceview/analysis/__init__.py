"""Pure analyses: Trace -> polars DataFrame / plain data. They never print or plot.

The data flows one way, and the sub-packages are layered in that order (import-linter
checks it: a package imports only from those below it):

- :mod:`.analyze` and :mod:`.shortcuts`: one :class:`~.analyze.Analysis` of one trace, its
  :class:`~.analyze.AnalysisConfig`, and the module-level shortcuts onto it;
- :mod:`.documents`: the documents built from the figures (summary, run, diff, check,
  info) and how they show themselves;
- :mod:`.work`: what the work costs: the model's and the device's figures, FLOPs, bytes,
  MFU and MBU;
- :mod:`.steps`: finding the engine's steps, their kinds and phases;
- :mod:`.timing`: where the time goes: busy, idle and its causes, decode gaps, cadence;
- :mod:`.classify`: each kernel's layer family;
- :mod:`.base`: the documents' types, statistics, precision, interval unions, names.
"""
