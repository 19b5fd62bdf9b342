"""Each kernel's layer family: ordered rules over its name (:mod:`.families`), and the
launching op's recorded shapes where the name alone cannot say (:mod:`.shapes`)."""
