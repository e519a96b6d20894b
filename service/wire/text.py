"""The few names a message shows of many, one rule for the service, the jobs and the tools.

    sample(["a", "b", "c", "d", "e"])           # 'a, b, c and 2 more'
    sample(["a", "b"])                          # 'a, b'
    sample(reasons, 5, sep="; ")                # 'a: x, y; b: z; ...; and 2 more'

The caller orders the names (sorted, or most first) and says what None, the whole table, reads
as; the status page's `sample` (service/server/static/status.html) says it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["sample"]


def sample(names: Sequence[str], shown: int = 3, *, sep: str = ", ") -> str:
    """The first `shown` of `names`, in their order, and how many more there are: `a, b, c and
    2 more`; all of them when they are no more than `shown`, "" for none. Names that hold
    commas are joined with another separator (`"; "`), which then sets off the tail too:
    `a: x, y; b: z; and 2 more`."""
    head = sep.join(names[:shown])
    left = len(names) - shown
    if left <= 0:
        return head
    return f"{head}{' ' if sep == ', ' else sep}and {left} more"
