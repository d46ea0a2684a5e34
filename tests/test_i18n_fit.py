"""``fit`` wholly in Japanese (issue 18): the texts that come from the GPU and model catalogs
(how a GPU's memory is known, where a model's geometry comes from, the catalog lists) are in the
language in force; names, cases and figures stay as they are."""

from __future__ import annotations

import re

import pytest

from oomdoctor.advisor.catalog import find_gpu, find_model, gpus, models
from oomdoctor.cli import main
from oomdoctor.i18n import use_lang
from oomdoctor.render.text import cell_len

#: English words of the catalog texts; none may be left in Japanese output
ENGLISH = re.compile(r"\b(?:nominal|usable|sold as|counted as|reports it|layers|config\.json of|every other)\b")


def _out(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    main(list(args))
    return capsys.readouterr().out


def test_every_catalog_model_says_its_source_in_japanese() -> None:
    for geo in models():
        repo = geo.source.removeprefix("config.json of ").split(" ")[0]
        assert geo.source_ja.startswith(f"{repo}のconfig.json"), geo.name
        assert ("(" in geo.source) == ("（" in geo.source_ja), geo.name  # a note is translated, not dropped
        with use_lang("ja"):
            assert geo.source_text() == geo.source_ja
        assert geo.source_text() == geo.source


def test_gpu_memory_labels_follow_the_language() -> None:
    h200, a10 = find_gpu("H200"), find_gpu("A10")
    assert h200 is not None and a10 is not None and not h200.reported and a10.reported
    assert h200.memory_label == "nominal (sold as 141 GB, counted as GiB); the usable memory is less"
    assert a10.memory_label == "usable, as PyTorch reports it (vllm-025: vLLM issue 10034)"
    with use_lang("ja"):
        assert h200.memory_label == "公称値（141 GBとして販売、GiBとして計算）。実際に使える容量はこれより少なくなります"
        assert a10.memory_label == "使用可能な容量（PyTorchの報告値、vllm-025: vLLM issue 10034）"


def test_fit_budget_sources_are_japanese(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out = _out(capsys, monkeypatch, "fit", "--lang", "ja", "--model", "google/gemma-2-9b-it", "--gpu", "H200")
    flat = re.sub(r"\s+", "", out)  # wrapped at 80 cells
    assert "カタログ：H200、公称値（141GBとして販売、GiBとして計算）" in flat
    assert "カタログ：google/gemma-2-9b-itのconfig.json（1層おきにローカル層）" in flat
    assert not ENGLISH.search(out), out
    english = " ".join(_out(capsys, monkeypatch, "fit", "--model", "google/gemma-2-9b-it", "--gpu", "H200").split())
    assert "catalog: config.json of google/gemma-2-9b-it (every other layer is local)" in english
    assert "catalog: H200, nominal (sold as 141 GB, counted as GiB); the usable memory is less" in english


@pytest.mark.parametrize("option", ["--list-gpus", "--list-models"])
def test_catalog_lists_are_japanese_and_line_up(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    ja = _out(capsys, monkeypatch, "fit", "--lang", "ja", option).splitlines()
    en = _out(capsys, monkeypatch, "fit", option).splitlines()
    assert len(ja) == len(en) == len(gpus() if option == "--list-gpus" else models())
    assert not any(ENGLISH.search(line) for line in ja), ja
    # the same names and figures; the last column starts at the same cell on every line
    assert [line.split("  ")[0] for line in ja] == [line.split("  ")[0] for line in en]
    if option == "--list-gpus":
        assert any(re.search(r"24\.00 GiB  公称 +24 GBとして販売$", line) for line in ja)
        assert any(re.search(r"79\.35 GiB  実測 +PyTorch, other-011 \(GPT-4-LLM issue 16\)$", line) for line in ja)
        starts = {cell_len(line[: re.search(r"(公称|実測) +", line).end()]) for line in ja}  # type: ignore[union-attr]
    else:
        llama = find_model("meta-llama/Llama-3.1-8B")
        assert llama is not None
        assert f"  32層  {llama.source_ja}" in "\n".join(ja)
        starts = {cell_len(line[: line.index("層  ") + 3]) for line in ja}
    assert len(starts) == 1, ja
