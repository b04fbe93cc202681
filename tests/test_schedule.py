"""The pure index arithmetic the algorithms share."""

from __future__ import annotations

import pytest

from allreduce.algorithms._schedule import PowerOfTwoFold, chunk_bounds, largest_power_of_two
from allreduce.transports.threads import ThreadWorld


@pytest.mark.parametrize("count", [0, 1, 2, 7, 10, 1000, 1009])
@pytest.mark.parametrize("parts", [1, 2, 3, 4, 5, 8, 13])
def test_chunks_tile_the_buffer_evenly(count, parts):
    bounds = [chunk_bounds(count, parts, i) for i in range(parts)]
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("p", range(1, 20))
def test_fold_maps_participants_one_to_one(p):
    folds = [PowerOfTwoFold(comm) for comm in ThreadWorld(p).communicators()]
    q = largest_power_of_two(p)
    assert q <= p < 2 * q
    virtual = [f.virtual_rank for f in folds if f.virtual_rank is not None]
    assert sorted(virtual) == list(range(q))
    for rank, fold in enumerate(folds):
        if fold.virtual_rank is not None:
            assert fold.real_rank(fold.virtual_rank) == rank
