"""Sizes: every figure in a report goes through parse_size, every size in a 'why' through format_size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.units import SizeError, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1.70 GiB", 1825361101),  # 1.70 × 2^30 = 1825361100.8 -> nearest byte
        ("79.35 GiB", 85201413734),  # the corpus label of other-011: 79.35 × 2^30 = 85201413734.4
        ("172.00 MiB", 180355072),  # 172 × 2^20
        ("12.19 MiB", 12782141),  # 12.19 × 2^20 = 12782141.44
        ("0 bytes", 0),
        ("1 byte", 1),
        ("512 B", 512),
        ("78521468kB", 80405983232),  # dmesg: kB is 2^10 (78521468 × 1024)
        ("2 KiB", 2048),
        ("1.5 K", 1536),
        ("3 M", 3 * 2**20),
        ("14.99 GB", 16095389942),  # vLLM's "GB" is binary: 14.99 × 2^30 = 16095389941.76
        ("1 TB", 2**40),
        ("2 TiB", 2 * 2**40),
        ("1 g", 2**30),
        ("1 t", 2**40),
        ("  4 GiB  ", 4 * 2**30),
        ("4GiB", 4 * 2**30),
        (".5 GiB", 2**29),
        ("1. GiB", 2**30),
        ("+1 MiB", 2**20),
        ("-1.05 GiB", -1127428915),  # vLLM prints a negative KV budget: -1.05 × 2^30 = -1127428915.2
        ("1e3 B", 1000),
        ("1.5E1 MiB", 15 * 2**20),
        ("2.5e-1 GiB", 2**28),
        ("0.5 b", 0),  # half a byte rounds to the even neighbour, 0
        ("1.5 bytes", 2),
    ],
)
def test_parse_size(text: str, want: int) -> None:
    assert parse_size(text) == want


@pytest.mark.parametrize(("text", "unit", "want"), [("3", "GiB", 3 * 2**30), ("3", "MiB", 3 * 2**20), ("3", "B", 3),
                                                   ("3 KiB", "GiB", 3072), ("7", "kb", 7168)])
def test_a_bare_number_takes_the_default_unit(text: str, unit: str, want: int) -> None:
    assert parse_size(text, unit) == want


def test_the_default_unit_is_bytes() -> None:
    assert parse_size("3") == 3


@pytest.mark.parametrize("text", ["", "GiB", "abc", "1 XB", "1 GiB extra", "1,5 GiB", "1.2.3 GiB", "1e400 GiB", "- 1 GiB",
                                  "1 G iB", "nan GiB", "inf GiB"])
def test_not_a_size(text: str) -> None:
    with pytest.raises(SizeError):
        parse_size(text)


def test_size_error_names_the_text_and_the_unit() -> None:
    with pytest.raises(SizeError, match=r"unknown unit 'XB' in '1 XB'"):
        parse_size("1 XB")
    with pytest.raises(SizeError, match=r"not a size: 'abc'"):
        parse_size("abc")
    with pytest.raises(SizeError, match=r"not a finite size: '1e400 GiB'"):
        parse_size("1e400 GiB")
    assert issubclass(SizeError, ValueError)


@pytest.mark.parametrize(
    ("n", "want"),
    [
        (None, "?"),
        (0, "0 B"),
        (1, "1 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (2**20 - 1, "1024.00 KiB"),  # 1048575 / 1024 = 1023.999 -> prints 1024.00, still KiB
        (2**20, "1.00 MiB"),
        (180355072, "172.00 MiB"),
        (2**30, "1.00 GiB"),
        (16095389942, "14.99 GiB"),
        (2**40, "1.00 TiB"),
        (5 * 2**40, "5.00 TiB"),
        (-1127428915, "-1.05 GiB"),
        (-5, "-5 B"),
        (1536.7, "1.50 KiB"),
        (10.9, "10 B"),
    ],
)
def test_format_size(n: int | float | None, want: str) -> None:
    assert format_size(n) == want


@given(st.integers(min_value=0, max_value=2**50))
def test_formatted_sizes_read_back_within_half_a_printed_step(n: int) -> None:
    text = format_size(n)
    back = parse_size(text)
    if n < 1024:
        assert back == n
    else:
        factor = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[text.split()[1]]
        assert abs(back - n) <= factor * 0.005 + 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16Gi", 16 * 2**30),
        ("16G", 16 * 10**9),
        ("1500Mi", 1500 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("512Ki", 512 * 2**10),
        ("2Ti", 2 * 2**40),
        ("2k", 2000),
        ("129M", 129 * 10**6),
        ("129e6", 129 * 10**6),
        ("128974848", 128974848),
        ("1T", 10**12),
        ("100m", 1),  # milli-bytes: a fraction of a byte rounds up, as Kubernetes does
    ],
)
def test_kubernetes_quantities_exactly(text: str, expected: int) -> None:
    from oomdoctor.units import parse_quantity

    assert parse_quantity(text) == expected


def test_kubernetes_quantities_refuse_what_they_are_not() -> None:
    from oomdoctor.units import SizeError, parse_quantity

    for bad in ("16GB", "16gi", "Gi", "16 Gi B", "-1Gi"):
        with pytest.raises(SizeError):
            parse_quantity(bad)


def test_kubernetes_quantity_written_in_the_unit_that_divides_it() -> None:
    from oomdoctor.units import format_quantity, parse_size

    assert format_quantity(20 * 2**30) == "20Gi"
    assert format_quantity(30 * 10**9) == "30G"
    assert format_quantity(1875 * 2**20) == "1875Mi"
    assert format_quantity(1001) == "1001"
    assert parse_size("16Gi") == 16 * 2**30  # the binary suffixes read the same in any figure
