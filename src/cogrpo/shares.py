"""The prompts-per-process split of a data-parallel run, in one place: every process takes the same count of an
iteration's prompts, a contiguous share of them in rank order, so a group never spans processes.

A leaf module (it imports only cogrpo.errors), so the params schema checks a split with the same function the
ranks split with (cogrpo.core.distributed.Ranks.share).
"""

from __future__ import annotations

from cogrpo.errors import InputError


def per_process(n: int, processes: int, what: str = "rows") -> int:
    """How many of n rows each of `processes` processes takes; InputError (a ValueError) naming `what` when n does
    not split evenly: whole groups per process."""
    if n % processes:
        raise InputError(f"{what} {n} does not split over {processes} processes: whole groups per process")
    return n // processes


def share(n: int, processes: int, rank: int) -> slice:
    """Process `rank`'s contiguous rows of n."""
    per = per_process(n, processes)
    return slice(rank * per, (rank + 1) * per)
