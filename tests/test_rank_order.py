"""Which algorithms combine the ranks' data in rank order (chapter "Why gradients must be
aggregated"): those work for an associative operation that is not commutative, as MPI
allows for user-defined operations; the others need commutativity too.

The operation is string concatenation (``np.add`` on ``str`` objects): associative, not
commutative, and the result spells out the order in which the ranks were combined.
"""

from __future__ import annotations

import pytest

from allreduce.testing import combination_order as combined

#: what chapter 10 says of each algorithm the chapters 20-50 teach
RANK_ORDER = ("naive", "reduce_broadcast", "tree", "recursive_doubling")
NEEDS_COMMUTATIVITY = ("parameter_server", "sharded_parameter_server", "ring", "rabenseifner")


@pytest.mark.parametrize("name", RANK_ORDER)
@pytest.mark.parametrize("p", range(1, 10))
def test_these_algorithms_combine_in_rank_order(name, p):
    expected = "".join(chr(ord("A") + r) for r in range(p))
    for rank, result in enumerate(combined(name, p)):
        assert (result == expected).all(), (name, p, rank, sorted(set(result)))


@pytest.mark.parametrize("name", NEEDS_COMMUTATIVITY)
def test_these_do_not_so_they_need_a_commutative_op(name):
    # on 4 ranks each of them combines some element out of rank order
    assert any((result != "ABCD").any() for result in combined(name, 4))


def test_the_ring_combines_chunk_c_from_rank_c_backwards():
    # rank r adds the incoming partial result after its own (reduce_local(op, own, incoming)),
    # and chunk c starts at rank c + 1: chunk 0 on 4 ranks is A + D + C + B
    result = combined("ring", 4, n=4)[0]
    assert list(result) == ["ADCB", "BADC", "CBAD", "DCBA"]
