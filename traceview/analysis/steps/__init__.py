"""Finding the engine's steps (:mod:`.find`): CUDA-graph capture regions left out first
(:mod:`.capture`), candidates from bursts, annotations and idle gaps and the arbiter
(:mod:`.candidates`), the engine's own step ranges and records (:mod:`.ranges`,
:mod:`.records`), each step's kind and phase, and its host-side annotation (:mod:`.host`)."""
