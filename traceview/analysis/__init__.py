"""Pure analyses: Trace -> polars DataFrame / plain data. They never print or plot."""
