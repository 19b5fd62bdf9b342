"""Where the time goes, on the analysed device: GPU busy (:mod:`.busy`), each idle
interval's cause and busy time by family (:mod:`.idle`), decode gaps (:mod:`.gaps`) and
the step cadence over each population (:mod:`.cadence`)."""
