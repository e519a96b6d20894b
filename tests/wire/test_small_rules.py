"""The small rules the service, the jobs and the tools share, each written once in service.wire:
the names a message shows, quantiles, and the runs under a holder."""

from __future__ import annotations

import pytest

from compactor.plan.rules import due_text
from service.wire.figures import quantile
from service.wire.holders import acts_under, is_run_under, run_holder
from service.wire.text import sample


@pytest.mark.parametrize(
    ("names", "shown", "said"),
    [
        ([], 3, ""),
        (["a"], 3, "a"),
        (["a", "b", "c"], 3, "a, b, c"),
        (["a", "b", "c", "d"], 3, "a, b, c and 1 more"),
        (list("abcdefg"), 5, "a, b, c, d, e and 2 more"),
    ],
)
def test_a_sample_names_the_first_few_and_counts_the_rest(names, shown, said):
    assert sample(names, shown) == said


def test_names_that_hold_commas_are_set_apart_tail_and_all():
    assert sample(["a: x, y", "b: z", "c: w"], 2, sep="; ") == "a: x, y; b: z; and 1 more"
    due = {f"p{i}": ("3 small files",) for i in range(7)}
    (reason,) = due_text(due)
    assert reason.endswith("p4: 3 small files; and 2 more")


def test_a_quantile_is_one_of_the_values_by_nearest_rank():
    assert quantile([], 0.5) is None
    assert quantile([7.0], 0.95) == 7.0
    assert quantile([100.0, 10.0], 0.5) == 10.0  # the p50 of two: the smaller
    assert quantile([100.0, 10.0], 0.95) == 100.0
    values = [float(n) for n in range(1, 21)]
    assert (quantile(values, 0.5), quantile(values, 0.95), quantile(values, 1.0)) == (
        10.0,
        19.0,
        20.0,
    )
    assert quantile([0.12345, 0.5], 0.5, ndigits=3) == 0.123


def test_a_run_under_a_holder_is_the_holder_a_slash_and_a_run():
    assert run_holder("compactor@h:1", "r7") == "compactor@h:1/r7"
    with pytest.raises(ValueError):
        run_holder("compactor@h:1", "")
    assert is_run_under("compactor@h:1/r7", "compactor@h:1")
    assert is_run_under("compactor@h:1/r7/x", "compactor@h:1")
    assert not is_run_under("compactor@h:1/", "compactor@h:1")  # no run
    assert not is_run_under("compactor@h:1", "compactor@h:1")  # the holder itself
    assert not is_run_under("compactor@h:10/r7", "compactor@h:1")
    assert not is_run_under("compactor@h:1", "compactor@h:1/r7")  # the other way round
    assert acts_under("compactor@h:1", "compactor@h:1")
    assert acts_under("compactor@h:1/r7", "compactor@h:1")
    assert not acts_under("compactor@h:1/", "compactor@h:1")
    assert not acts_under("compactor@h:1", "compactor@h:1/r7")
