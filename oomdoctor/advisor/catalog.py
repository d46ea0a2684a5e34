"""Shipped catalogs (``oomdoctor/data/*.toml``): model geometry and GPUs, plus ``config.json`` reading.

Every :class:`ModelGeometry` carries ``source``: the config.json it was copied from, or the path of
the config the user passed. A catalog entry carries its Japanese beside the English (``ja.source``);
:meth:`ModelGeometry.source_text` gives the one of the language in force. Lookups are by exact name, alias, or the repo's basename (case-insensitive).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from oomdoctor import cache
from oomdoctor.advisor.memory_model_mm import (
    ClipTower,
    MllamaVision,
    VisionTower,
    llava_tower,
    mllama_vision,
    vision_tower,
)
from oomdoctor.advisor.weights import (
    WeightBytes,
    config_weight_bytes,
    hub_config,
    hub_weight_bytes,
    linear_bytes_per_param,
    safetensors_weight_bytes,
)
from oomdoctor.i18n import _, current_lang

DATA = Path(__file__).resolve().parent.parent / "data"

#: bytes per element of the dtypes vLLM accepts for --dtype / --kv-cache-dtype
DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "auto": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8": 1,
}  # fmt: skip


@dataclass(frozen=True)
class ModelGeometry:
    """What the memory model needs to know about a model (config.json fields)."""

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    source: str
    params: float | None = None  # billions
    dtype: str = "bfloat16"
    weight_bytes_per_param: float | None = None
    max_position_embeddings: int | None = None
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    vocab_size: int | None = None
    #: ``source`` in Japanese (catalog entries: ``ja.source``); empty for a config the user passed
    source_ja: str = ""
    hidden_size: int | None = None
    intermediate_size: int | None = None  # per expert for MoE (moe_intermediate_size)
    experts: int = 1
    experts_per_token: int = 1
    #: weight bytes of the whole checkpoint (safetensors headers or the quantization-aware config
    #: estimate, :mod:`oomdoctor.advisor.weights`), and where that figure comes from
    weights_total: int | None = None
    weights_source: str = ""
    #: the checkpoint's quantization method (``quantization_config``), None when unquantized
    quantization: str | None = None
    #: a Qwen2-VL-family vision tower (its profile-run budget, :mod:`~oomdoctor.advisor.memory_model_mm`)
    vision: VisionTower | None = None
    #: mllama's vision tower (V0's encoder-decoder profile run, :mod:`~oomdoctor.advisor.memory_model_mm`)
    mllama: MllamaVision | None = None
    #: a LLaVA / LLaVA-NeXT CLIP tower (V0's profile run, :mod:`~oomdoctor.advisor.memory_model_mm`)
    llava: ClipTower | None = None
    #: the config describes a multimodal model (a ``vision_config``), modelled tower or not: vLLM
    #: treats it as one (V0: no chunked prefill by default, at least 5120 batched tokens)
    multimodal: bool = False

    def source_text(self) -> str:
        """``source`` in the language in force (a path stays as it is)."""
        return self.source_ja if current_lang() == "ja" and self.source_ja else self.source

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """``max(1, kv_heads // tp)`` (heads replicated when TP exceeds them); MLA: one latent head."""
        if self.is_mla:
            return 1
        return max(1, self.kv_heads // max(1, tp))

    def kv_entry_bytes(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """Bytes one token takes in ONE attention layer (K and V; MLA: the latent only)."""
        if self.is_mla:
            return (int(self.kv_lora_rank or 0) + int(self.qk_rope_head_dim or 0)) * kv_dtype_bytes
        return 2 * self.kv_heads_per_rank(tp) * self.head_dim * kv_dtype_bytes

    def full_layers(self, pp: int = 1) -> int:
        return -(-(self.layers - self.sliding_window_layers) // max(1, pp))

    def sliding_layers(self, pp: int = 1) -> int:
        return -(-self.sliding_window_layers // max(1, pp)) if self.sliding_window_layers else 0

    @property
    def hidden(self) -> int:
        """hidden_size; for catalog entries without it, heads × head_dim (true of Llama, Qwen, Mistral)."""
        return self.hidden_size or self.attention_heads * (self.head_dim or 128)

    def weight_bytes(self, dtype_bytes: float | None = None) -> int | None:
        """Weight bytes: the checkpoint's (``weights_total``) or params × bytes per parameter.

        ``dtype_bytes`` (``--dtype``) re-sizes an unquantized checkpoint only: vLLM keeps a quantized
        checkpoint's quantized layers whatever ``--dtype`` says (issue 33 §2).
        """
        if self.weights_total is not None:
            if dtype_bytes is None or self.quantization is not None:
                return self.weights_total
            return int(self.weights_total * dtype_bytes / DTYPE_BYTES.get(self.dtype, 2))
        if self.params is None:
            return None
        if self.weight_bytes_per_param is not None:
            dtype_bytes = None  # quantized catalog entry: --dtype does not change it
        per = dtype_bytes if dtype_bytes is not None else (
            self.weight_bytes_per_param or DTYPE_BYTES.get(self.dtype, 2)
        )
        return int(self.params * 1e9 * per)


def _geometry(entry: dict[str, Any]) -> ModelGeometry:
    heads = int(entry["attention_heads"])
    geo = _catalog_geometry(entry, heads)
    if entry.get("quantization") == "mxfp4" and geo.hidden_size and geo.intermediate_size:
        # gpt-oss: the padded mxfp4 expert tensors vLLM allocates, from the entry's config fields
        wb = config_weight_bytes({
            "hidden_size": geo.hidden_size, "num_hidden_layers": geo.layers, "num_attention_heads": heads,
            "num_key_value_heads": geo.kv_heads, "head_dim": geo.head_dim, "vocab_size": geo.vocab_size,
            "intermediate_size": geo.intermediate_size, "num_local_experts": geo.experts,
            "torch_dtype": geo.dtype, "quantization_config": {"quant_method": "mxfp4"},
        })
        if wb is not None:
            geo = replace(geo, weights_total=wb.total, weights_source=wb.source, quantization="mxfp4")
    return geo


def _catalog_geometry(entry: dict[str, Any], heads: int) -> ModelGeometry:
    return ModelGeometry(
        name=entry["name"],
        layers=int(entry["layers"]),
        attention_heads=heads,
        kv_heads=int(entry.get("kv_heads", heads)),
        head_dim=int(entry.get("head_dim", 0)),
        source=entry["source"],
        params=entry.get("params"),
        dtype=entry.get("dtype", "bfloat16"),
        weight_bytes_per_param=entry.get("weight_bytes_per_param"),
        max_position_embeddings=entry.get("max_position_embeddings"),
        sliding_window=entry.get("sliding_window"),
        sliding_window_layers=int(entry.get("sliding_window_layers", 0)),
        kv_lora_rank=entry.get("kv_lora_rank"),
        qk_rope_head_dim=entry.get("qk_rope_head_dim"),
        vocab_size=entry.get("vocab_size"),
        source_ja=str(entry.get("ja", {}).get("source", "")),
        hidden_size=entry.get("hidden_size"),
        intermediate_size=entry.get("intermediate_size"),
        experts=int(entry.get("experts", 1)),
        experts_per_token=int(entry.get("experts_per_token", 1)),
    )


@lru_cache(maxsize=1)
def _models() -> tuple[dict[str, ModelGeometry], list[ModelGeometry]]:
    data = cache.load_toml(DATA / "models.toml")
    index: dict[str, ModelGeometry] = {}
    entries: list[ModelGeometry] = []
    for entry in data["model"]:
        geo = _geometry(entry)
        entries.append(geo)
        for name in [entry["name"], *entry.get("aliases", [])]:
            index[name.lower()] = geo
            index.setdefault(name.rsplit("/", 1)[-1].lower(), geo)
    return index, entries


def models() -> list[ModelGeometry]:
    return list(_models()[1])


def find_model(name: str | None) -> ModelGeometry | None:
    """The catalog entry for a model name or path (``/models/Qwen2.5-7B-Instruct`` works too)."""
    if not name:
        return None
    index = _models()[0]
    key = name.strip().strip("'\"").rstrip("/").lower()
    return index.get(key) or index.get(key.rsplit("/", 1)[-1])


@dataclass(frozen=True)
class GpuSpec:
    """A catalog GPU. ``memory_bytes`` is the usable capacity a real log reported for the card
    when one did (``reported``), else the nominal size the vendor sells (``nominal_gib``)."""

    name: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    reported: bool  # memory_bytes is a reported usable capacity (True) or the nominal size (False)
    #: short name of the report the figure was seen in ("" when nominal)
    source: str = ""
    #: the nominal size, sold as "N GB" and counted as N GiB (binary-sized memory)
    nominal_gib: float = 0.0
    #: who printed the reported figure ("PyTorch" or "vLLM"), the corpus case and its public URL
    reported_by: str = ""
    case: str = ""
    url: str = ""
    #: NVLink/NVSwitch (or Infinity Fabric) between the GPUs of a node (gpus.toml ``nvlink``)
    nvlink: bool = False

    @property
    def memory_label(self) -> str:
        """How the memory figure is known, in the language in force: "usable, as PyTorch reports it
        (CASE: SOURCE)" or "nominal (sold as N GB, counted as GiB); the usable memory is less"."""
        if not self.reported:
            return _("nominal (sold as {size} GB, counted as GiB); the usable memory is less").format(
                size=f"{self.nominal_gib:g}")
        where = ": ".join(x for x in (self.case, self.source) if x)
        who = self.reported_by or "PyTorch"
        if where:
            return _("usable, as {who} reports it ({where})").format(who=who, where=where)
        return _("usable, as {who} reports it").format(who=who)

    @property
    def fp8_tensor_cores(self) -> bool:
        """Native fp8 GEMM: compute capability 8.9 (Ada) or newer."""
        return self.compute_capability >= (8, 9)

    @property
    def cc(self) -> int:
        return self.compute_capability[0] * 10 + self.compute_capability[1]


@lru_cache(maxsize=1)
def _gpus() -> dict[str, GpuSpec]:
    data = cache.load_toml(DATA / "gpus.toml")
    out: dict[str, GpuSpec] = {}
    for entry in data["gpu"]:
        major, minor = (int(x) for x in entry["compute_capability"].split("."))
        reported = "reported_gib" in entry
        nominal = float(entry["memory_gib"])
        gib = float(entry["reported_gib"]) if reported else nominal
        spec = GpuSpec(
            entry["name"], int(gib * 2**30), (major, minor), reported, entry.get("reported_source", ""),
            nominal_gib=nominal, reported_by=entry.get("reported_by", ""),
            case=entry.get("reported_case", "") or entry.get("reported_startup", ""),
            url=entry.get("reported_url", ""), nvlink=bool(entry.get("nvlink", False)),
        )
        for n in [entry["name"], *entry.get("aliases", [])]:
            out[_gpu_key(n)] = spec
    return out


def _gpu_key(name: str) -> str:
    k = name.lower().replace("nvidia", "").replace("geforce", "").replace("tesla", "")
    return "".join(ch for ch in k if ch.isalnum())


def find_gpu(name: str | None) -> GpuSpec | None:
    if not name:
        return None
    return _gpus().get(_gpu_key(name))


def gpu_sizes(name: str) -> list[str]:
    """The catalog cards a bare model number stands for when it is sold in several sizes
    (``A100`` -> A100-40GB, A100-80GB); [] when ``name`` names one card (an entry's own name)."""
    key = _gpu_key(name)
    if any(_gpu_key(g.name) == key for g in gpus()):
        return []
    return sorted(g.name for g in gpus() if _gpu_key(g.name).startswith(key))


def gpu_names() -> list[str]:
    return sorted({g.name for g in _gpus().values()})


def gpus() -> list[GpuSpec]:
    """Every GPU of the catalog, once each, smallest memory first."""
    seen = {g.name: g for g in _gpus().values()}
    return sorted(seen.values(), key=lambda g: (g.memory_bytes, g.name))


def repo_name(geo: ModelGeometry, asked: str | None) -> str:
    """The repository to put in a command for ``geo`` found as ``asked``: ``asked`` when it is a
    repo id (``org/name``), else the catalog's repo whose basename it is; never an invented name."""
    if asked and "/" in asked.strip("/"):
        return asked
    names = [geo.name, *_aliases().get(geo.name, [])]
    if asked:
        for n in names:
            if n.rsplit("/", 1)[-1].lower() == asked.lower():
                return n
    return geo.name


@lru_cache(maxsize=1)
def _aliases() -> dict[str, list[str]]:
    data = cache.load_toml(DATA / "models.toml")
    return {e["name"]: list(e.get("aliases", [])) for e in data["model"]}


# -- config.json ---------------------------------------------------------------------------


def _num(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


#: the defaults transformers gives a text_config that leaves fields out (transformers 4.47.0
#: models/llama/configuration_llama.py, models/mistral/configuration_mistral.py); the published
#: LLaVA and LLaVA-NeXT configs (llava-hf/llava-1.5-7b-hf, llava-v1.6-mistral-7b-hf) rely on them
TEXT_CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "max_position_embeddings": 2048},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32,
                "sliding_window": 4096},
}


def geometry_from_config(cfg: dict[str, Any], source: str) -> ModelGeometry:
    """Read KV geometry from a Hugging Face ``config.json`` (multimodal: its ``text_config``, with
    transformers' defaults for the fields a llama or mistral text_config leaves out)."""
    full = cfg
    text = cfg.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" not in text and str(text.get("model_type")) in TEXT_CONFIG_DEFAULTS:
        cfg = {**cfg, "text_config": {**TEXT_CONFIG_DEFAULTS[str(text["model_type"])], **text}}
        full = cfg
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" in cfg["text_config"]:
        outer_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
        cfg = {**cfg["text_config"]}
        cfg.setdefault("torch_dtype", outer_dtype)
    layers = int(_num(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    heads = int(_num(cfg, "num_attention_heads", "n_head"))
    kv = int(_num(cfg, "num_key_value_heads", "num_kv_heads") or heads)
    hidden = _num(cfg, "hidden_size", "n_embd")
    head_dim = int(_num(cfg, "head_dim") or (int(hidden) // heads if hidden else 0))
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False:
        window = None
    sliding_layers = 0
    if window:
        types = cfg.get("layer_types")
        if isinstance(types, list) and types:
            sliding_layers = sum(1 for t in types if "sliding" in str(t))
        elif cfg.get("sliding_window_pattern"):
            pattern = int(cfg["sliding_window_pattern"])  # gemma3: every pattern-th layer is global
            sliding_layers = layers - layers // pattern
        elif str(cfg.get("model_type", "")).startswith("gemma2"):
            sliding_layers = layers // 2
        else:
            sliding_layers = layers
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    qcfg = cfg.get("quantization_config") or {}
    quant = linear_bytes_per_param(qcfg if isinstance(qcfg, dict) else None)
    wb = config_weight_bytes(full)
    experts = int(_num(cfg, "num_local_experts", "num_experts", "n_routed_experts") or 1)
    return ModelGeometry(
        name=str(full.get("_name_or_path") or source),  # the model served, not its text_config's origin
        layers=layers,
        attention_heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        source=source,
        params=estimate_params(cfg),
        dtype=dtype,
        weight_bytes_per_param=None,
        max_position_embeddings=_num(cfg, "max_position_embeddings", "n_positions"),
        sliding_window=int(window) if window else None,
        sliding_window_layers=sliding_layers,
        kv_lora_rank=cfg.get("kv_lora_rank"),
        qk_rope_head_dim=cfg.get("qk_rope_head_dim") if cfg.get("kv_lora_rank") else None,
        vocab_size=cfg.get("vocab_size"),
        hidden_size=int(hidden) if hidden else None,
        intermediate_size=_num(cfg, "moe_intermediate_size", "intermediate_size") if experts > 1
        else _num(cfg, "intermediate_size"),
        experts=experts,
        experts_per_token=int(_num(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk") or 1),
        weights_total=wb.total if wb else None,
        weights_source=wb.source if wb else "",
        quantization=quant[1] if quant else None,
        vision=vision_tower(full),
        mllama=mllama_vision(full),
        llava=llava_tower(full),
        multimodal=isinstance(full.get("vision_config"), dict) or isinstance(full.get("img_processor"), dict),
    )


def estimate_params(cfg: dict[str, Any]) -> float | None:
    """Parameter count (billions) from the tensor shapes of a dense or MoE decoder config.

    attention (q, k, v, o) + MLP (gate, up, down) × experts + embeddings (+ lm_head unless tied).
    MLA models return None (their projections are not described by these fields alone).
    """
    if cfg.get("kv_lora_rank"):
        return None
    try:
        hidden = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        vocab = int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None
    experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 1)
    inter = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 4 * hidden) if experts > 1 else int(
        cfg.get("intermediate_size") or 4 * hidden
    )
    attn = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    mlp = 3 * hidden * inter * experts
    emb = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return (layers * (attn + mlp) + emb) / 1e9


def load_config(path: str | Path) -> ModelGeometry:
    """A ``config.json``, or a model directory: its ``config.json`` and, when present, the exact
    weight bytes of its safetensors headers."""
    p = Path(path)
    if p.is_dir():
        geo = geometry_from_config(json.loads((p / "config.json").read_text("utf-8")),
                                   source=f"config.json ({p / 'config.json'})")
        exact = safetensors_weight_bytes(p)
        return with_weights(geo, exact) if exact else geo
    return geometry_from_config(json.loads(p.read_text("utf-8")), source=f"config.json ({p})")


def with_weights(geo: ModelGeometry, wb: WeightBytes) -> ModelGeometry:
    """``geo`` with its weight bytes read from safetensors headers (exact)."""
    return replace(geo, weights_total=wb.total, weights_source=wb.source)


def config_model_name(path: str | Path) -> str | None:
    """The ``_name_or_path`` a config.json records (the repo it came from), if any."""
    try:
        cfg = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    name = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def with_dtype(geo: ModelGeometry, dtype: str | None) -> ModelGeometry:
    """``geo`` served with ``--dtype``: unquantized weights re-sized to it; a quantized checkpoint's
    weights unchanged (its quantized layers keep their width)."""
    if not dtype or dtype == "auto":
        return geo
    if geo.weights_total is not None and geo.quantization is None:
        scaled = geo.weight_bytes(DTYPE_BYTES.get(dtype, 2))
        return replace(geo, dtype=dtype, weights_total=scaled)
    return replace(geo, dtype=dtype)


def runtime_quantized(geo: ModelGeometry, method: str) -> ModelGeometry:
    """``geo`` loaded with ``--quantization METHOD`` from an unquantized checkpoint (fp8 online):
    linear layers at the method's width, embeddings and ``lm_head`` (2 × vocab × hidden) in 16 bits."""
    q = linear_bytes_per_param({"quant_method": method})
    base = geo.weight_bytes()
    if q is None or base is None or geo.quantization is not None:
        return geo
    per, name = q
    b16 = DTYPE_BYTES.get(geo.dtype, 2)
    emb = 2 * int(geo.vocab_size or 0) * geo.hidden
    linear = max(0, base / b16 - emb)
    total = int(linear * per + emb * b16)
    return replace(geo, weights_total=total, quantization=name,
                   weights_source=_("--quantization {method}: linear layers {per} B/param, "
                                    "embeddings and lm_head {bytes} B").format(
                       method=method, per=f"{per:g}", bytes=f"{b16:g}"))


def load_hub(repo: str) -> ModelGeometry | None:
    """``repo``'s config.json and safetensors headers from the Hugging Face Hub (optional
    ``huggingface_hub``; None when it is missing, offline, or the repo has no config)."""
    cfg = hub_config(repo)
    if cfg is None:
        return None
    try:
        geo = geometry_from_config(cfg, source=f"config.json (Hub: {repo})")
    except (KeyError, TypeError, ValueError):
        return None
    exact = hub_weight_bytes(repo)
    return with_weights(geo, exact) if exact else geo
