"""Blocks of a JSON trace decoded on several processes and handed back in file order.

The loader (:mod:`traceview.loader.json`) cuts the text into blocks as it always does and
queues each here: a block goes to a helper process (:mod:`traceview.loader.helpers`) that has
room for it, else it is decoded in this process at once, so this process works while the
helpers do. :meth:`InOrder.done` gives the blocks back in the order they were cut; a block
a helper could not decode comes back without a result, for the loader to decode in order
(it then names a bad event by its number in the whole trace, as one process would).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import polars as pl

from traceview.loader import helpers
from traceview.loader.helpers import Helpers

# the blocks a load reads before it starts helper processes, unless its text is known to
# be larger: a small trace never pays for their start (an interpreter and polars each)
SERIAL_BLOCKS = 2
AHEAD_PER_HELPER = 2  # blocks queued for each helper (one decoding, one waiting)
# A helper that has not answered a block in this long is taken for stuck (stopped, or alive
# and deadlocked): the helpers are ended and their blocks decoded here. A block takes
# 0.1-1 s; a slower one on a machine swapping hard is still decoded, only here.
ANSWER_WAIT_S = 120.0
# a helper for every this many blocks the text is expected to hold, at most: one that
# would decode a block or two costs more to start (an interpreter, polars, about 60 MB)
# than it saves
BLOCKS_PER_HELPER = 4


def helpers_for(workers: int, blocks: int) -> int:
    """The helper processes a load on ``workers`` processes starts for a text expected to
    hold ``blocks`` blocks: at least one, at most ``workers - 1`` and one fewer than the
    cores (``workers`` bounds the cores used; more processes than cores only wait)."""
    return max(1, min(workers - 1, helpers.cores() - 1, blocks // BLOCKS_PER_HELPER))


@dataclass
class Decoded:
    """What one block's events became, decoded on its own (its events numbered from 0),
    to be added to the load in file order."""

    parts: dict[str, list[pl.DataFrame]]
    skipped: dict[str, int]
    overlay_events: int
    events: int
    wide_ids: bool


@dataclass
class Pending:
    """A block cut from the text, being decoded (``future``) or decoded (``result``; None
    when it is still to be decoded, by the loader, in order)."""

    text: bytes  # the block and the separator after it, as cut from the text
    cut: int  # the block is text[:cut]
    consumed: int  # bytes of JSON text before it
    future: Future[object] | None = None
    result: Decoded | None = None


class InOrder:
    """``helpers`` helper processes and this one decoding blocks with ``decode(block,
    *args)``; the blocks handed back in the order they were queued."""

    def __init__(
        self,
        helpers: int,
        decode: Callable[..., Decoded | None],
        args: tuple[object, ...],
    ) -> None:
        self.helpers = Helpers(helpers, args, Decoded)
        self._decode = decode
        self._args = args
        self._pending: deque[Pending] = deque()

    def queue(self, text: bytes, cut: int, consumed: int) -> None:
        """Decode the block ``text[:cut]`` on a helper with room for it, else here now."""
        item = Pending(text, cut, consumed)
        if (
            not self.helpers.broken
            and self.helpers.backlog() < AHEAD_PER_HELPER * self.helpers.count
        ):
            item.future = self.helpers.submit(text[:cut])
        else:
            item.result = self._decode_here(item)
        self._pending.append(item)

    def _decode_here(self, item: Pending) -> Decoded | None:
        """``item``'s block decoded by this process; None where it fails (the loader then
        decodes it again in order, naming the bad event by its number in the trace)."""
        try:
            return self._decode(item.text[: item.cut], *self._args)
        except Exception:  # decoded again in order by the loader, which names the event
            return None

    def done(self, *, wait: bool) -> Iterator[Pending]:
        """The blocks at the head of the queue, in order: all of them when ``wait``, else
        those decoded (waiting for the first only while too many are queued). A block that
        would be waited for while its helper starts, or at the end behind another block,
        is decoded here instead: this process does not idle while it could be working."""
        limit = 2 * AHEAD_PER_HELPER * self.helpers.count + 2
        while self._pending:
            item = self._pending[0]
            if item.future is not None:
                future = item.future
                if not (wait or future.done() or len(self._pending) > limit):
                    return
                if self.helpers.worth_waiting(future, last=wait):  # True once answered
                    try:
                        answer = future.result(timeout=ANSWER_WAIT_S)
                    except FutureTimeout:
                        self.helpers.give_up(f"one did not answer a block in {ANSWER_WAIT_S:g} s")
                        answer = future.result()  # answered None once its helper ended
                    item.result = answer if isinstance(answer, Decoded) else None
                    self.helpers.forget(future)
                else:  # taken back before it is decoded here: not sent, if not sent yet
                    self.helpers.forget(future)
                    item.result = self._decode_here(item)
            self._pending.popleft()
            yield item

    def text_from(self, item: Pending) -> bytes:
        """The text of ``item`` (just handed back) and of every block queued after it; the
        queue is emptied."""
        text = b"".join([item.text, *(p.text for p in self._pending)])
        self._pending.clear()
        return text

    def close(self) -> None:
        self._pending.clear()
        self.helpers.close()
