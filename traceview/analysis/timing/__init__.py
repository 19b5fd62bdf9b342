"""Where the time goes, on the analysed device: GPU busy (:mod:`.busy`), each idle
interval's cause and busy time by family (:mod:`.idle`), whether the host's and the
device's clocks agree enough to split it (:mod:`.clocks`), decode gaps (:mod:`.gaps`) and
the step cadence over each population (:mod:`.cadence`)."""
