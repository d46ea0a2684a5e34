"""A fixed, stratified sample of a fixture × variant grid, for the default (fast) test run.

Fixture ``i`` of ``n`` gets the variants ``i*k, i*k+1, ..., i*k+k-1`` (mod ``v``): consecutive
fixtures take consecutive variants, so as soon as ``n*k >= v`` every variant appears at least
``n*k // v`` times and every fixture ``k`` times. The sample depends on nothing but the sizes (no
randomness, no clock): a failure in it reproduces on every run and every machine.

The rest of the grid runs under the ``slow`` marker (``python3 -m pytest -m slow``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

A = TypeVar("A")
B = TypeVar("B")


def variant_indices(i: int, n_variants: int, per_fixture: int) -> list[int]:
    """The variants fixture ``i`` gets (each once, in order)."""
    k = min(per_fixture, n_variants)
    return sorted({(i * k + j) % n_variants for j in range(k)})


def stratified(fixtures: Sequence[A], variants: Sequence[B], per_fixture: int) -> list[tuple[A, B]]:
    """The sampled (fixture, variant) pairs, fixture by fixture."""
    return [
        (f, variants[j])
        for i, f in enumerate(fixtures)
        for j in variant_indices(i, len(variants), per_fixture)
    ]


def in_sample(i: int, j: int, n_variants: int, per_fixture: int) -> bool:
    """Fixture ``i`` with variant ``j`` is in the sample."""
    return j in variant_indices(i, n_variants, per_fixture)


def slow_but(values: Sequence[A], *default: A, ids: Callable[[A], str] | None = None) -> list[Any]:
    """``values`` as ``pytest.param``s, all but ``default`` marked ``slow``: a test whose variants
    each take seconds (megabytes fed in several chunk sizes) runs the ``default`` ones by default
    and the rest under ``-m slow``."""
    import pytest

    missing = [d for d in default if d not in values]
    assert not missing, missing
    return [
        pytest.param(*(v if isinstance(v, tuple) else (v,)), id=ids(v) if ids else None,
                     marks=[] if v in default else [pytest.mark.slow])
        for v in values
    ]
