"""Python's cycle collector paused while check-pod reads and judges a file of pods.

Reading 1,000 step pods allocates hundreds of thousands of dicts and lists that all stay alive
until the report is printed, and the collector's passes over them (every 700 net allocations, the
full ones growing with the heap) found nothing to free: pods are trees (`yaml_stream` breaks
shared nodes), and a whole check-pod run makes no cyclic garbage (`gc.collect()` after a run with
the collector off: 0 objects). Those passes were 16-24 % of the CPU time of judging the file
(docs/performance.md). Reference counting frees everything as before; whatever cycle a rare path
makes is collected after the pause, when the collector runs again.

What the block allocated and kept is then handed to the oldest generation (`gc.freeze()` and
`gc.unfreeze()`, which put every tracked object there), not left young: the first young pass after
the pause would otherwise walk every pod of the report once more (about 45 ms for 1,000 pods).
Where a caller froze objects itself (`gc.get_freeze_count()`), they stay frozen and this is not done.
The oldest generation is walked at the next full collection, as any long-lived object is.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """The cycle collector off inside the block, then as it was (also when the block raises), with
    what the block kept in the oldest generation."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if not gc.get_freeze_count():  # (objects a caller froze itself stay frozen)
                gc.freeze()
                gc.unfreeze()
            gc.enable()
