"""Weight bytes as vLLM loads them: exact from safetensors headers, else a quantization-aware
estimate from ``config.json``.

Sources, best first:

* **safetensors headers** of a local model directory: an 8-byte little-endian header length, then a
  JSON header mapping every tensor to ``dtype``, ``shape`` and ``data_offsets`` (the safetensors
  format, huggingface/safetensors ``docs/source/index.mdx``). The sum of ``end − start`` over all
  tensors is the bytes on disk, per dtype: what hf-mem and llm-d-planner read.
* **config.json**: linear layers at the quantized width, embeddings and ``lm_head`` in 16 bits (vLLM
  keeps ``VocabParallelEmbedding``/``ParallelLMHead`` unquantized unless a method says otherwise;
  research/vllm-memory-model.md §6: "Non-quantized tensors stay in the model dtype: embeddings,
  usually lm_head, norms").
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomdoctor.i18n import _

#: bytes per element of the safetensors dtypes (safetensors ``Dtype``)
SAFETENSORS_DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1, "F4": 0.5,
}  # fmt: skip

#: a header longer than this is not a safetensors header (the format caps it at 100 MB)
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class WeightBytes:
    """Total weight bytes and where the figure comes from."""

    total: int
    source: str
    exact: bool
    by_dtype: tuple[tuple[str, int], ...] = ()


def read_safetensors_header(path: str | Path) -> dict[str, Any]:
    """The JSON header of one ``.safetensors`` file (reads only the header, not the tensors)."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"{path}: header of {length} bytes")
        header = json.loads(fh.read(length).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    return header


def header_bytes(header: dict[str, Any]) -> dict[str, int]:
    """Bytes per dtype of the tensors one header lists (``__metadata__`` skipped)."""
    out: dict[str, int] = {}
    for name, t in header.items():
        if name == "__metadata__" or not isinstance(t, dict):
            continue
        start, end = t["data_offsets"]
        out[str(t["dtype"])] = out.get(str(t["dtype"]), 0) + int(end) - int(start)
    return out


def safetensors_weight_bytes(directory: str | Path) -> WeightBytes | None:
    """Sum of the tensors of every ``*.safetensors`` file in ``directory``; None when there is none."""
    d = Path(directory)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        return None
    per: dict[str, int] = {}
    for f in files:
        for dt, n in header_bytes(read_safetensors_header(f)).items():
            per[dt] = per.get(dt, 0) + n
    return WeightBytes(sum(per.values()), _("safetensors headers ({path}, {count} files)").format(
        path=d, count=len(files)), True,
                       tuple(sorted(per.items())))


def hub_weight_bytes(repo: str, revision: str | None = None) -> WeightBytes | None:
    """Weight bytes from the Hub's safetensors headers (ranged reads of the headers only), when the
    optional ``huggingface_hub`` is installed and the Hub answers; None otherwise (offline)."""
    try:
        from huggingface_hub import get_safetensors_metadata
    except ImportError:
        return None
    try:
        meta = get_safetensors_metadata(repo, revision=revision)
    except Exception:  # offline, gated, not a safetensors repo: fall back to config.json
        return None
    per: dict[str, int] = {}
    for fm in meta.files_metadata.values():
        for t in fm.tensors.values():
            start, end = t.data_offsets
            per[t.dtype] = per.get(t.dtype, 0) + int(end) - int(start)
    if not per:
        return None
    return WeightBytes(sum(per.values()), _("Hub safetensors headers ({repo})").format(repo=repo), True,
                       tuple(sorted(per.items())))


def hub_config(repo: str, revision: str | None = None) -> dict[str, Any] | None:
    """``config.json`` of a Hub repo (cached by ``huggingface_hub``); None without it or offline."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    try:
        path = hf_hub_download(repo, "config.json", revision=revision)
        cfg = json.loads(Path(path).read_text("utf-8"))
    except Exception:  # offline, gated, no such repo
        return None
    return cfg if isinstance(cfg, dict) else None


# -- config.json estimate ---------------------------------------------------------------------


def _int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for k in keys:
        if cfg.get(k) is not None:
            return int(cfg[k])
    return default


def linear_bytes_per_param(qcfg: dict[str, Any] | None) -> tuple[float, str] | None:
    """Bytes per parameter of the quantized linear layers, with the method's name; None = unquantized.

    * fp8 (``quant_method: fp8``, W8A8/FP8 block): 1 B, plus one fp32 scale per 128×128 block when
      ``weight_block_size`` is given (vLLM fp8.py ``weight_scale_inv``).
    * compressed-tensors: ``num_bits / 8`` of the weights of its ``config_groups`` (+ a 16-bit scale
      per ``group_size`` weights for the group strategy).
    * awq / gptq: ``bits / 8`` + (16-bit scale + ``bits``-bit zero) per ``group_size`` (default 128).
    * mxfp4: 4 bits + one e8m0 scale per 32 = 4.25 bits (research §6).
    * bitsandbytes 4-bit: 4 bits + fp32 absmax per 64 (research §6).
    """
    if not isinstance(qcfg, dict) or not qcfg:
        return None
    qm = str(qcfg.get("quant_method", "")).lower()
    if qm in ("fp8", "fbgemm_fp8", "modelopt") and "fp4" not in str(qcfg.get("quant_algo", "")).lower():
        block = qcfg.get("weight_block_size")
        extra = 4 / (int(block[0]) * int(block[1])) if isinstance(block, list) and len(block) == 2 else 0
        return 1 + extra, "fp8"
    if qm == "compressed-tensors":
        groups = qcfg.get("config_groups") or {}
        for g in groups.values() if isinstance(groups, dict) else []:
            w = g.get("weights") or {}
            bits = int(w.get("num_bits") or 16)
            gs = w.get("group_size")
            scale = 2 / int(gs) if w.get("strategy") == "group" and gs else 0
            kind = f"{w.get('type', 'int')}{bits}"
            return bits / 8 + scale, f"compressed-tensors {kind}"
        return None
    if qm in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round"):
        bits = int(qcfg.get("bits") or qcfg.get("w_bit") or 4)
        gs = int(qcfg.get("group_size") or qcfg.get("q_group_size") or 128)
        if gs <= 0:
            gs = 4096  # per-channel: one scale per output row, negligible
        return bits / 8 + (2 + bits / 8) / gs, f"{qm} {bits}-bit"
    if qm == "mxfp4":
        return 4.25 / 8, "mxfp4"
    if qm == "modelopt_fp4" or "fp4" in str(qcfg.get("quant_algo", "")).lower():
        return 4.5 / 8, "nvfp4"
    if qm == "bitsandbytes":
        return (0.5 + 4 / 64, "bitsandbytes 4-bit") if qcfg.get("load_in_4bit") else (1.0, "bitsandbytes 8-bit")
    other_bits = qcfg.get("bits")
    if other_bits:
        return int(other_bits) / 8, f"{qm or 'quantized'} {other_bits}-bit"
    return None


def vision_params(vcfg: Any) -> int:
    """Parameters of a multimodal model's vision tower (kept 16-bit by the quantization methods):
    per layer attention (q, k, v, o: 4·H²) and MLP (2·H·I, 3·H·I when gated with SiLU), from
    ``vision_config`` (``embed_dim`` before ``hidden_size``: Qwen2-VL's ``hidden_size`` is the width the
    merger hands the text model, 3584 for the 7B, not the tower's 1280); 0 without one."""
    if not isinstance(vcfg, dict):
        return 0
    h = _int(vcfg, "embed_dim", "hidden_size")
    depth = _int(vcfg, "num_hidden_layers", "depth")
    inter = _int(vcfg, "intermediate_size", default=4 * h)
    gated = "silu" in str(vcfg.get("hidden_act", ""))
    return depth * (4 * h * h + (3 if gated else 2) * h * inter)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def mxfp4_expert_bytes(hidden: int, inter: int, experts: int) -> int:
    """One layer's mxfp4 experts as vLLM allocates them (model_executor/layers/quantization/mxfp4.py
    @v0.10.1 ``create_weights``, Marlin path, taken on Hopper with torch < 2.8 and on Ampere): the
    intermediate size rounded up to 128 and the hidden size to 256; per expert ``w13`` (2I × H/2 B of
    packed 4-bit, 2I × H/32 e8m0 scales, 2I bf16 bias) and ``w2`` (H × I/2, H × I/32, H bf16 bias)."""
    i, h = _round_up(inter, 128), _round_up(hidden, 256)
    w13 = 2 * i * h // 2 + 2 * i * h // 32 + 2 * i * 2
    w2 = h * i // 2 + h * i // 32 + h * 2
    return experts * (w13 + w2)


def _dtype_bytes(dtype: str) -> float:
    return 4 if dtype in ("float32", "fp32", "float") else 2


def config_weight_bytes(cfg: dict[str, Any], dtype: str | None = None) -> WeightBytes | None:
    """Weight bytes of a dense or MoE decoder from its config: linear layers at the quantized width
    (``quantization_config``), embeddings, ``lm_head``, norms and routers in the 16-bit model dtype.

    ``dtype`` (``--dtype``) changes the width of unquantized tensors only: a quantized checkpoint
    keeps its quantized linear layers whatever ``--dtype`` says.
    """
    vision = vision_params(cfg.get("vision_config"))
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" in cfg["text_config"]:
        outer = cfg
        cfg = {**cfg["text_config"]}
        cfg.setdefault("quantization_config", outer.get("quantization_config"))
        cfg.setdefault("torch_dtype", outer.get("torch_dtype") or outer.get("dtype"))
    if cfg.get("kv_lora_rank"):
        return None
    try:
        hidden = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        vocab = int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None
    kv = _int(cfg, "num_key_value_heads", default=heads)
    head_dim = _int(cfg, "head_dim", default=hidden // heads)
    experts = _int(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=1)
    inter = _int(cfg, "intermediate_size", default=4 * hidden)
    moe_inter = _int(cfg, "moe_intermediate_size", default=inter) if experts > 1 else inter
    attn = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    mlp = 3 * hidden * moe_inter * experts
    router = hidden * experts if experts > 1 else 0
    norms = 2 * hidden + (2 * head_dim if str(cfg.get("model_type", "")).startswith("qwen3") else 0)
    emb = vocab * hidden
    head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    wdtype = dtype if dtype and dtype != "auto" else str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    b16 = _dtype_bytes(wdtype)
    q = linear_bytes_per_param(cfg.get("quantization_config"))
    if q is None:
        total = (layers * (attn + mlp + router + norms) + emb + head + hidden + vision) * b16
        return WeightBytes(int(total), _("config.json: parameters × {bytes} B ({dtype})").format(
            bytes=f"{b16:g}", dtype=wdtype), False)
    per, method = q
    qcfg = cfg["quantization_config"]
    not_converted = [str(m) for m in (qcfg.get("modules_to_not_convert") or qcfg.get("ignore") or [])]
    if method == "mxfp4" or any("attn" in m for m in not_converted):
        # gpt-oss: only the MoE experts are mxfp4 (attention in modules_to_not_convert): 16-bit attention
        linear_q, linear_16 = layers * mlp, layers * attn
    else:
        linear_q, linear_16 = layers * (attn + mlp), 0
    rest = linear_16 + emb + head + layers * (router + norms) + hidden + vision
    total = linear_q * per + rest * b16
    if method == "mxfp4":
        total = mxfp4_expert_bytes(hidden, moe_inter, experts) * layers + rest * b16
    return WeightBytes(int(total), _(
        "config.json: {method} linear layers ({per} B/param), embeddings and lm_head {bytes} B"
    ).format(method=method, per=f"{per:.3g}", bytes=f"{b16:g}"), False)
