"""Deprecated names: each renamed public name keeps working for one release, and reading it
warns with a :class:`DeprecationWarning` that gives the new name.

The renamed document keys are in
:data:`traceview.analysis.base.document.DEPRECATED_KEYS`; they are written beside their
new names, and ``check`` warns when a bound names one.
"""

from __future__ import annotations

import warnings


def deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new``.

    ``stacklevel`` 3 names the caller of the function that calls this one: the user's
    line that read the old name.
    """
    warnings.warn(
        f"{old} is deprecated and goes in the next release: use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
