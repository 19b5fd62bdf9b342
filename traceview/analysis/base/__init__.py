"""What every analysis shares: the documents' types (:mod:`.document`), percentiles with
their n (:mod:`.stats`), the documents' precision (:mod:`.precision`), interval unions
(:mod:`.intervals`), which kernels a CPU range launched (:mod:`.launches`) and short kernel
names (:mod:`.names`)."""
