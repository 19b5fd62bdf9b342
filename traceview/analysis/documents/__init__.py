"""The documents: the ``traceview.summary/1`` document and its tables (:mod:`.summary`),
the run's cross-rank document (:mod:`.run`), ``diff`` (:mod:`.compare`; what it compares
and which rows it judges, :mod:`.verdicts`), ``check``
(:mod:`.checks`), ``info`` (:mod:`.info`), the figures several documents share
(:mod:`.figures`), and how documents show themselves in notebooks and pull requests
(:mod:`.display`)."""
