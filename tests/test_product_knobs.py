"""Every remedy key of every fixture is a knob of the finding's product at the log's version (issue 32).

Over ``fixtures/*/*.log`` each remedy's ``flags``, ``env`` and ``settings`` keys are looked up in
``rules/advice/knobs.toml`` (:func:`oomdoctor.advisor.knobs.has_knob`): the product's own knobs, its
engine's generated flag data where it takes those flags (a flag's value too, ``--flag=value``), and
the host's knobs for the ``host.*`` remedies. A key that is none of these fails, naming the fixture,
the remedy, the product and the key.

Two explicit lists say what is not checked today, each entry with its reason; a test fails when an
entry is no longer needed, so they only shrink:

- ``NOT_KNOBS``: keys that are words, not a key the product reads (a remedy that can only be said in
  prose, or a key written with its location in brackets);
- ``ADVISOR_BUGS``: a real-looking key the product does not have (the advisor should print the
  product's own name for it).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.advisor.knobs import HOST, KnobsError, has_knob, knobs, load_knobs
from oomdoctor.advisor.versions import flag_exists

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(ROOT.glob("fixtures/*/*.log"))
ANY = "*"

#: (product or "*", field, key) -> why the key is not a knob (the advisor should say it otherwise)
NOT_KNOBS: dict[tuple[str, str, str], str] = {
    (ANY, "settings", "swap size"): "host advice in words (mkswap/swapon); no program reads a key of that name",
    (ANY, "settings", "alternative"): "prose beside --shm-size (docker --ipc=host, a Kubernetes memory emptyDir)",
    (ANY, "settings", "from_pretrained"): "a call, not a key: the knob is low_cpu_mem_usage=True, given as the value",
    (ANY, "settings", "model"): "choosing another checkpoint, not a knob (LLaMA-Factory's key is model_name_or_path; "
    "vllm serve takes the model as its positional argument)",
    ("pytorch", "settings", "batch_size"): "a plain PyTorch program's own batch size: its name is the program's",
    ("jax", "settings", "batch_size"): "a JAX program's own batch (or walkers, chains): its name is the program's",
    ("monai", "settings", "batch_size"): "the program's own batch (its DataLoader's): sliding_window_inference's "
    "sw_batch_size is windows per forward pass, not the batch",
    ("hf-trainer", "settings", "TrainingArguments(fsdp=...)"): "code, not a key: the TrainingArguments key is fsdp",
    ("hf-trainer", "settings", "get_peft_model(model, ...)"): "a code change (peft), not a setting",
    ("trtllm", "settings", "kv_cache_free_gpu_mem_fraction (Triton config.pbtxt)"): "Triton's tensorrtllm_backend "
    "parameter, with its location in brackets in the key",
    ("vllm-python", "settings", "torch.cuda.empty_cache()"): "a call in the program that embeds LLM, before "
    "llm.wake_up() (sleep mode), not a keyword of LLM(...)",
    ("trtllm", "settings", "max_batch_size (trtllm-build)"): "trtllm-build's --max_batch_size, with the program in "
    "brackets in the key (fixed when the engine is built)",
    ("trtllm", "settings", "max_num_tokens (trtllm-build)"): "trtllm-build's --max_num_tokens for the engine a "
    "Triton deployment runs, with the program in brackets in the key (fixed when the engine is built)",
}

#: (product, field, key) -> why the product lacks it: keys the advisor prints that the product does not have
ADVISOR_BUGS: dict[tuple[str, str, str], str] = {
    ("deepspeed", "settings", "gradient_checkpointing"): "a TrainingArguments name; DeepSpeed's config has "
    "activation_checkpointing",
    ("pytorch", "settings", "bf16"): "a TrainingArguments name; a plain PyTorch program uses "
    "torch.autocast(dtype=torch.bfloat16)",
    ("pytorch", "settings", "optim"): "a TrainingArguments name; a plain PyTorch program constructs "
    "bitsandbytes.optim.AdamW8bit",
    ("pytorch", "settings", "gradient_checkpointing"): "a TrainingArguments name; a plain PyTorch program "
    "calls torch.utils.checkpoint",
}


@lru_cache(maxsize=1)
def emitted() -> tuple[tuple[str, str, str | None, str, str, str, str | None], ...]:
    """(fixture, remedy id, product, field, key, value, version) for every remedy key of every fixture."""
    out = []
    for path in FIXTURES:
        report = oomdoctor.diagnose(path.read_bytes(), source=path.name)
        version = report.context.engine_version
        for finding in report.findings:
            for rem in finding.remedies:
                for field in ("flags", "env", "settings"):
                    for key, value in getattr(rem, field).items():
                        name = f"{path.parent.name}/{path.name}"
                        out.append((name, rem.id, finding.product, field, key, value, version))
    return tuple(out)


def _allowed(product: str | None, field: str, key: str) -> bool:
    p = product or ""
    return any(k in NOT_KNOBS for k in ((p, field, key), (ANY, field, key))) or (p, field, key) in ADVISOR_BUGS


def _is_knob(rid: str, product: str | None, field: str, key: str, value: str, version: str | None) -> bool:
    if not has_knob(product, field, key, version, host=rid.startswith("host.")):
        return False
    entry = knobs().get(product or "")
    listed = entry is not None and entry.find(field, key) is not None
    if field == "flags" and value and entry is not None and entry.engine_flags and not listed:
        ver = version if entry.log_version == "own" else None
        return flag_exists(entry.engine_flags, f"{key}={value}", ver) is not False
    return True


def test_fixtures_give_remedy_keys() -> None:
    assert len(FIXTURES) > 200
    assert len({(p, f, k) for _, _, p, f, k, _, _ in emitted()}) > 80


def test_every_remedy_key_is_a_knob_of_its_product() -> None:
    wrong = sorted(
        f"{fx}: {rid} gives {field} {key!r}{'=' + repr(value) if field == 'flags' and value else ''} "
        f"for product {product} at version {version}"
        for fx, rid, product, field, key, value, version in emitted()
        if not _allowed(product, field, key) and not _is_knob(rid, product, field, key, value, version)
    )
    assert wrong == [], "not a knob of the product (add it to rules/advice/knobs.toml with a citation, or fix the remedy):\n" + "\n".join(wrong)


@pytest.mark.parametrize("entry", sorted(NOT_KNOBS) + sorted(ADVISOR_BUGS), ids=lambda e: "-".join(e))
def test_allow_list_entry_is_still_needed(entry: tuple[str, str, str]) -> None:
    """Each entry is still printed by a remedy and is still not a knob: remove it once it is fixed."""
    product, field, key = entry
    hits = [
        (rid, p, version)
        for _, rid, p, f, k, _, version in emitted()
        if f == field and k == key and (product == ANY or (p or "") == product)
    ]
    assert hits, f"no remedy prints {field} {key!r} for {product} any more: remove the entry"
    assert not all(has_knob(p, field, key, v, host=rid.startswith("host.")) for rid, p, v in hits)


def test_every_product_seen_has_a_catalog_section() -> None:
    seen = {p for _, _, p, _, _, _, _ in emitted() if p is not None}
    assert seen - set(knobs()) == set()


def test_catalog_sections_are_products_or_host() -> None:
    from oomdoctor.rulepack import default_pack

    assert set(knobs()) - set(default_pack().products) == {HOST}


def test_every_hand_knob_cites_its_source() -> None:
    for pid, entry in knobs().items():
        assert entry.source.strip(), pid
        for k in entry.knob:
            assert k.source.strip(), (pid, k.key)


def test_products_that_run_another_engine_take_only_its_true_knobs() -> None:
    # LoRAX forked TGI 0.9: --max-input-length, never TGI 2.0's --max-input-tokens
    assert has_knob("tgi", "flags", "--max-input-tokens", None) is True
    assert has_knob("lorax", "flags", "--max-input-tokens", None) is False
    assert has_knob("lorax", "flags", "--max-input-length", None) is True
    # LLM(...) takes keyword arguments, not `vllm serve` flags
    assert has_knob("vllm-python", "flags", "--gpu-memory-utilization", None) is False
    assert has_knob("vllm-python", "settings", "gpu_memory_utilization", None) is True
    assert has_knob("vllm-serve", "settings", "gpu_memory_utilization", None) is False
    # ollama runs llama.cpp but is configured through its own options and variables
    assert has_knob("ollama", "flags", "-ngl", None) is False
    assert has_knob("ollama", "settings", "num_gpu", None) is True


def test_versions_gate_knobs() -> None:
    assert has_knob("vllm-python", "settings", "cpu_offload_gb", "0.5.2") is False
    assert has_knob("vllm-python", "settings", "cpu_offload_gb", "0.5.3") is True
    assert has_knob("vllm-python", "settings", "swap_space", "0.17.1") is True
    assert has_knob("vllm-python", "settings", "swap_space", "0.18.0") is False
    assert has_knob("vllm-python", "settings", "swap_space", None) is False  # unknown version: the current release
    assert has_knob("vllm-serve", "flags", "--kv-cache-memory-bytes", "0.9.0") is False
    assert has_knob("vllm-serve", "flags", "--kv-cache-memory-bytes", "0.11.0") is True
    # llama-cpp-python's log gives llama.cpp's build, not its own release: its spans are not applied
    assert has_knob("llama-cpp-python", "settings", "n_ubatch", "4567") is True


def test_host_knobs_only_for_host_remedies() -> None:
    assert has_knob("pytorch", "flags", "--shm-size", None, host=True) is True
    assert has_knob("pytorch", "flags", "--shm-size", None) is False
    assert has_knob(None, "env", "NCCL_SHM_DISABLE", None, host=True) is True
    assert has_knob(None, "env", "NCCL_SHM_DISABLE", None) is False
    assert has_knob("no-such-product", "settings", "num_ctx", None) is False


def test_vllm_python_keywords_are_engine_args() -> None:
    """LLM(...)'s keywords are EngineArgs fields, the `vllm serve` flags with underscores."""
    for k in knobs()["vllm-python"].knob:
        if k.field == "settings":
            assert flag_exists("vllm", "--" + k.key.replace("_", "-"), k.until or "0.11.0") is True, k.key


# --- the loader's errors -----------------------------------------------------------------------

GOOD_KNOB = 'field = "settings"\nkey = "num_ctx"\nsource = "api/types.go"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[ollama]\nlog_version = "own"\n', "[ollama] source: Field required"),
        ('[ollama]\nsource = "x"\nlog_version = "mine"\n', "[ollama] log_version: Input should be 'own' or 'other'"),
        ('[ollama]\nsource = "x"\nlog_version = "own"\nengine_flags = "ollama"\n',
         "[ollama] engine_flags: Input should be 'vllm', 'sglang', 'llama.cpp' or 'tgi'"),
        ('[ollama]\nsource = "x"\nlog_version = "own"\nrunz = "x"\n', "[ollama] runz: Extra inputs are not permitted"),
        ('[ollama]\nsource = "x"\nlog_version = "own"\n[[ollama.knob]]\nfield = "flag"\nkey = "k"\nsource = "s"\n',
         "[ollama] knob.0.field: Input should be 'flags', 'env' or 'settings'"),
        ('[ollama]\nsource = "x"\nlog_version = "own"\n[[ollama.knob]]\nfield = "env"\nkey = "K"\n',
         "[ollama] knob.0.source: Field required"),
        ('[ollama]\nsource = "x"\nlog_version = "own"\n[[ollama.knob]]\n' + GOOD_KNOB + 'since = "soon"\n',
         "[ollama] knob.0.since: Value error, not a version: 'soon'"),
        ('[ollama]\nsource = "x"\nlog_version = "own"\n[[ollama.knob]]\n' + GOOD_KNOB + "[[ollama.knob]]\n" + GOOD_KNOB,
         "[ollama]: Value error, settings 'num_ctx' is listed twice"),
        ('[no-such]\nsource = "x"\nlog_version = "own"\n', "[no-such]: not a product of rules/products.toml"),
        ('ollama = 3\n', "[ollama]: a table is expected"),
    ],
)
def test_loader_names_file_product_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "knobs.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(KnobsError) as err:
        load_knobs(path, {"ollama"})
    assert str(err.value) == f"{path}: {message}"


def test_loader_reports_a_toml_syntax_error_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "knobs.toml"
    path.write_text("[ollama\n", encoding="utf-8")
    with pytest.raises(KnobsError) as err:
        load_knobs(path)
    assert str(err.value).startswith(f"{path}: ")


def test_loader_accepts_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "knobs.toml"
    path.write_text('[ollama]\nsource = "x"\nlog_version = "own"\n[[ollama.knob]]\n' + GOOD_KNOB + 'since = "0.1.0"\n', encoding="utf-8")
    got = load_knobs(path, {"ollama"})
    assert list(got) == ["ollama"]
    knob = got["ollama"].find("settings", "num_ctx")
    assert knob is not None and knob.since == "0.1.0" and knob.at("0.0.9") is False and knob.at("0.1.0") is True


def test_readme_lists_every_product_with_knobs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Products and their knobs", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    missing = [pid for pid in knobs() if pid != HOST and not any(f"`{pid}`" in row.split("|")[1] for row in rows)]
    assert missing == []
    assert any(row.startswith("| (host)") for row in rows)
