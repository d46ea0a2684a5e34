"""The benchmark's log shapes (bench/genlog.py, bench/logshapes/): written the same way every time,
the first benchmark's log unchanged, and every failure they hold one that oomdoctor recognises.

No timing here: the benchmark measures speed, these tests keep its inputs honest.
"""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

import pytest

from oomdoctor.api import diagnose
from tests.sampling import slow_but

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import genlog

#: sha256 of ``genlog.py --size 8MiB`` as the first benchmark (generator version 3) wrote it
FIRST_BENCHMARK_8MIB = "dd631edc2a643d4bef4c057b4c6942b4ac5eecc8973d8fac42b79b7e854e0438"


def test_vllm_serving_log_is_the_first_benchmarks_log_byte_for_byte(tmp_path: Path) -> None:
    path = genlog.generate(8 << 20, tmp_path / "serving.log", "vllm-serving")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == FIRST_BENCHMARK_8MIB


#: shapes whose 8 MiB are written twice by default (a quick plain one and a quick one behind a
#: prefix); ``-m slow`` writes every shape twice
WRITTEN_TWICE_BY_DEFAULT = ("llamacpp-server", "deepspeed-ranks")


@pytest.mark.parametrize("shape", slow_but(list(genlog.SHAPES), *WRITTEN_TWICE_BY_DEFAULT))
def test_each_shape_is_written_the_same_way_twice_and_to_size(shape: str, tmp_path: Path) -> None:
    a = genlog.generate(genlog.MIN_SIZE, tmp_path / "a.log", shape).read_bytes()
    b = genlog.generate(genlog.MIN_SIZE, tmp_path / "b.log", shape).read_bytes()
    assert a == b
    assert genlog.MIN_SIZE - (64 << 10) < len(a) <= genlog.MIN_SIZE
    assert a.endswith(b"\n")


def _one_failure(shape: genlog.Shape, k: int) -> bytes:
    """Start-up, some traffic, the k-th failure (and its restart), more traffic."""
    rng = random.Random(k)
    wrap = shape.wrap() if shape.wrap else (lambda b: b)
    head = ("\n".join(shape.head(rng, 0)) + "\n").encode()
    before, sec = shape.traffic(rng, 0, 20_000)
    failure = ("\n".join(shape.failure(rng, k)) + "\n").encode()
    after, _ = shape.traffic(rng, sec, 20_000)
    return b"".join(wrap(part) for part in (head, before, failure, after))


@pytest.mark.parametrize("shape", list(genlog.SHAPES))
def test_each_failure_of_each_shape_is_found_once_with_the_expected_kind(shape: str) -> None:
    sh = genlog.SHAPES[shape]
    for k in range(genlog.OOM_BLOCKS):
        report = diagnose(_one_failure(sh, k))
        assert [f.kind for f in report.findings] == [sh.expect], (shape, k)
