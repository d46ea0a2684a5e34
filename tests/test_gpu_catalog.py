"""The GPU catalog's memory figures: each usable figure is found in the real log it cites, and
the nominal ones are labelled as such, counted in the unit the memory is built in."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.advisor.catalog import DATA, find_gpu, find_model, gpus
from oomdoctor.advisor.fit import fit
from oomdoctor.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ENTRIES: list[dict[str, Any]] = tomllib.loads((DATA / "gpus.toml").read_text("utf-8"))["gpu"]
REPORTED = [e for e in ENTRIES if "reported_case" in e]
STARTUP_REPORTED = [e for e in ENTRIES if "reported_startup" in e]
STARTUPS = Path(__file__).resolve().parent / "data" / "vllm_startups" / "cases.json"


def test_the_catalog_has_reported_figures_for_the_cards_the_corpus_names() -> None:
    assert {e["name"] for e in REPORTED} == {
        "V100-32GB", "A10", "RTX 3090", "RTX 4090", "A100-40GB", "A100-80GB", "H20-141GB", "RTX 5080", "H100",
    }
    assert {e["name"] for e in STARTUP_REPORTED} == {"L40S"}
    assert all("reported_gib" in e for e in REPORTED + STARTUP_REPORTED)


@pytest.mark.parametrize("entry", STARTUP_REPORTED, ids=[e["name"] for e in STARTUP_REPORTED])
def test_each_startup_figure_is_the_total_of_the_startup_it_cites(entry: dict[str, Any]) -> None:
    """A figure cited from tests/data/vllm_startups/cases.json: that start-up ran on the card and
    printed this total."""
    cases = {c["id"]: c for c in json.loads(STARTUPS.read_text("utf-8"))["cases"]}
    case = cases[entry["reported_startup"]]
    assert case["gpu"] == entry["name"] and case["total"] == entry["reported_gib"]


@pytest.mark.parametrize("entry", REPORTED, ids=[e["name"] for e in REPORTED])
def test_each_usable_figure_is_in_the_log_it_cites(entry: dict[str, Any]) -> None:
    case = entry["reported_case"]
    (log,) = FIXTURES.glob(f"*/{case}.log")
    label = json.loads(log.with_name(f"{case}.label.json").read_text("utf-8"))
    figure = f"{entry['reported_gib']:.2f} GiB"
    printed = {
        "PyTorch": [f"total capacity of {figure}", f"{figure} total capacity"],
        "vLLM": [f"total_gpu_memory ({figure.replace(' ', '')})"],
    }[entry["reported_by"]]
    assert any(p in log.read_text("utf-8", "replace") for p in printed), (case, figure)
    assert label["source_url"] == entry["reported_url"]
    # the case names the card: its model number (A100, RTX 3090, H20 ...) and, where the catalog
    # tells sizes apart, the size ("A100 80GB", "H20 141GB")
    card = label["gpu"].replace("-", " ")
    model = re.sub(r"(GB)?$", "", entry["name"].replace("-", " ")).split(" ")
    assert all(part.removesuffix("GB") in card for part in model), (card, entry["name"])


def test_nominal_gb_is_binary_sized_memory() -> None:
    """Vendors write "80GB"; the reported usable capacity of HBM cards is above 80e9 bytes, so
    the nominal figure is 80 GiB, an upper bound, not 80 × 10^9 bytes."""
    for e in REPORTED:
        assert e["reported_gib"] <= e["memory_gib"], e["name"]
    for name in ("V100-32GB", "A100-40GB", "A100-80GB", "H20-141GB", "RTX 3090", "H100"):
        (e,) = (x for x in REPORTED if x["name"] == name)
        assert e["reported_gib"] * 2**30 > e["memory_gib"] * 10**9, name
    h200 = find_gpu("H200")
    assert h200 is not None and not h200.reported and h200.memory_bytes == 141 * 2**30


@pytest.mark.parametrize(("gpu", "total", "label"), [
    ("A10G", 24 * 2**30, "catalog: A10G, nominal (sold as 24 GB, counted as GiB); the usable memory is less"),
    ("H200", 141 * 2**30, "catalog: H200, nominal (sold as 141 GB, counted as GiB); the usable memory is less"),
    ("H100", int(79.22 * 2**30), "catalog: H100, usable, as vLLM reports it (vllm-049: vLLM PR 12126)"),
    ("L40S", int(44.42 * 2**30), "catalog: L40S, usable, as vLLM reports it (B9: vLLM 0.10.2 start-up on 8× L40S)"),
    ("A100-80GB", int(79.35 * 2**30),
     "catalog: A100-80GB, usable, as PyTorch reports it (other-011: GPT-4-LLM issue 16)"),
])
def test_fit_uses_the_best_figure_and_labels_it(
    gpu: str, total: int, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", gpu, "--format", "json"])
    budget = json.loads(capsys.readouterr().out)["budget"]
    assert budget[0] == {"term": "GPU memory", "bytes": total, "source": label}
    geo, spec = find_model("meta-llama/Llama-3.1-8B"), find_gpu(gpu)
    assert geo is not None and spec is not None and fit(geo, spec).total_bytes == total


def test_list_gpus_shows_usable_and_nominal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--list-gpus"]) == 0
    rows = {line.split("  ")[0].strip(): line for line in capsys.readouterr().out.splitlines()}
    assert set(rows) == {g.name for g in gpus()}
    assert re.search(r"79\.35 GiB\s+usable\s+PyTorch, other-011 \(GPT-4-LLM issue 16\)$", rows["A100-80GB"])
    assert re.search(r"24\.00 GiB\s+nominal\s+sold as 24 GB$", rows["A10G"])
    assert re.search(r"79\.22 GiB\s+usable\s+vLLM, vllm-049 \(vLLM PR 12126\)$", rows["H100"])
    assert all(len(line) <= 80 for line in rows.values())


def test_gaudi_is_not_in_the_catalog() -> None:
    """No engine path of oomdoctor's `fit` (vLLM on CUDA/ROCm) covers Intel Gaudi."""
    assert find_gpu("Gaudi 3") is None and find_gpu("HL-325L") is None
