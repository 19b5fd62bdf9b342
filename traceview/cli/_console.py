"""The one console every command writes its lines and bars to: stderr, no markup, no
highlighting (trace text is data), long lines kept whole."""

from __future__ import annotations

from rich.console import Console

stderr = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
