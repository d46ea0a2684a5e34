"""Generate ``rules/phases.generated.toml``, the phase evidence read from the upstream sources.

Each engine and framework runs its stages (loading weights, profiling, sizing and allocating the
KV cache, CUDA-graph capture, warm-up, serving, the training step) in functions of its own, and
prints its progress from them. This script reads the releases' Python sources with :mod:`ast`
(nothing is imported or run) and writes, for each phase:

- ``frames``: the functions that run the stage (the *roots* named in :data:`STAGES`, where a
  sampled release defines them in the files named there), and the methods of the same class those
  call directly (``self.NAME(...)``), unless that name is generic (:data:`GENERIC`), a root of
  another stage, or reached from two stages (a helper both profiling and capture call, vLLM V1's
  ``_dummy_run``, names neither);
- ``paths``: the stage's modules (a frame in them counts whatever its function's name), where the
  release holds them;
- frames named with their file (``/FILE::NAME``), for a stage whose roots have names too common
  to tell it alone (:attr:`Stage.qualified`: bitsandbytes' ``Params4bit.to``);
- ``processes``: the classes of a stage's files that Ray runs as actors (``@ray.remote``), whose
  name prefixes each line they print ("(ActorModelRayActor pid=N)": an RL trainer's roles);
- ``progress``: the lines the stage's functions log (``logger.info``/``warning``, ``print``, a
  progress bar's ``desc=``): the longest literal piece of the format string, when it has two words
  and 12 characters. A line that says the stage is over (its wording: "took", "finished", ...; or
  nothing but logging and ``return`` follows it in a root) names the stage that comes next
  (``then``), where one does; any other names the stage itself. A piece two stages print is
  dropped.

llama.cpp is read as C++ (the release node-llama-cpp bundles): each ``LLAMA_LOG_INFO("%s: ...",
__func__)`` line starts with the name of the function printing it, so the function's stage is the
line's (a line printed after the stage's ``work`` call names the stage after it).

Every entry keeps, under ``origins``, the file it was read from and the releases that have it.

Usage::

    tools/fetch_phase_sources.sh DEST       # the sampled releases, as DEST/<package>-<version>
    python tools/gen_phase_table.py DEST > rules/phases.generated.toml

``tests/test_phase_table.py`` regenerates the table from ``$OOMDOCTOR_PHASE_SOURCES`` (default
``~/.cache/oomdoctor/phase-sources``) when that folder holds the releases, and fails on drift.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from oomdoctor.rulepack.loader import PHASE_PRIORITY

#: the phases, in the order the scanner asks them (the more specific stage first)
ORDER = PHASE_PRIORITY


#: the "phase" of functions that run in two stages: their frames and lines are no evidence, and
#: a line they print that a stage prints too is dropped from it
SHARED = "shared"


@dataclass(frozen=True)
class Stage:
    """Where one package runs one stage."""

    phase: str
    #: the functions that run it
    roots: tuple[str, ...]
    #: globs of the files (relative to the unpacked release) that define them
    files: tuple[str, ...]
    #: the phase that follows it, named by a line saying it is over (None: the same phase)
    then: str | None = None
    #: the stage's modules (directories end with "/"), as pieces of a frame's file path
    paths: tuple[str, ...] = ()
    #: its lines report what it decided, as it ends (vLLM's KV-cache sizes: the allocation that
    #: follows is of that size and fails only with a traceback of its own), so each names ``then``
    reports: bool = False
    #: (C++) the calls that do the stage's work: a line printed after the last of them in a root
    #: reports it done and names ``then``
    work: tuple[str, ...] = ()
    #: its roots are frames only in their own file ("/FILE::NAME"), generic names too
    qualified: bool = False
    #: its files' Ray actor classes (``@ray.remote``) run only this stage
    actors: bool = False


_VLLM_WORKER = (
    "vllm/worker/*.py", "vllm/v1/worker/*.py", "vllm/executor/*.py", "vllm/v1/executor/*.py",
)
_VLLM_ENGINE = ("vllm/engine/llm_engine.py", "vllm/v1/engine/core.py")
_SGL = ("sglang/srt/model_executor/*.py", "sglang/srt/managers/*.py", "sglang/srt/mem_cache/*.py")

#: per package (the name of its unpacked folder before the version), the stages it runs
STAGES: dict[str, list[Stage]] = {
    "vllm": [
        Stage("weights-load", ("load_model",), _VLLM_WORKER, then="profiling",
              paths=("/vllm/model_executor/model_loader/",)),
        Stage("weights-load", ("load_weights", "_initialize_model", "get_model", "load_model",
                               "process_weights_after_loading", "_process_weights_after_loading"),
              ("vllm/model_executor/model_loader/*.py", "vllm/model_executor/model_loader/**/*.py")),
        Stage("profiling", ("profile_run", "determine_num_available_blocks", "determine_available_memory",
                            "profile_num_available_blocks"), _VLLM_WORKER, then="kv-cache-alloc"),
        Stage("kv-cache-alloc", ("initialize_cache", "_init_cache_engine", "_allocate_kv_cache",
                                 "initialize_kv_cache", "initialize_kv_cache_tensors",
                                 "_allocate_kv_cache_tensors", "_reshape_kv_cache_tensors",
                                 "initialize_from_config", "allocate_gpu_cache", "get_kv_cache_config",
                                 "_report_kv_cache_config"),
              (*_VLLM_WORKER, "vllm/worker/cache_engine.py", "vllm/v1/core/kv_cache_utils.py"),
              then="inference", reports=True),
        Stage("cudagraph-capture", ("capture_model", "_capture_cudagraphs", "_warm_up_model", "capture"),
              _VLLM_WORKER, then="inference"),
        Stage("warmup", ("compile_or_warm_up_model", "_dummy_sampler_run", "_dummy_pooler_run", "kernel_warmup"),
              (*_VLLM_WORKER, "vllm/model_executor/warmup/*.py"), then="inference",
              paths=("/vllm/model_executor/warmup/",)),
        Stage("inference", ("execute_model", "execute_model_async", "_process_model_outputs", "engine_step",
                            "run_engine_loop", "step_async", "run_busy_loop", "_run_engine", "sample_tokens"),
              (*_VLLM_WORKER, *_VLLM_ENGINE, "vllm/engine/async_llm_engine.py", "vllm/entrypoints/llm.py",
               "vllm/v1/engine/async_llm.py")),
        # the server starts listening once the engine is up; its stats lines come while it serves
        Stage("inference", ("serve_http", "log"), ("vllm/entrypoints/launcher.py", "vllm/engine/metrics.py",
                                                    "vllm/v1/metrics/loggers.py")),
    ],
    # llama.cpp (C++, from the release node-llama-cpp bundles): each line starts with the function
    # that prints it ("llm_load_tensors: offloading 32 repeating layers to GPU"). The context's
    # compute buffers, reserved after the KV cache, are what a run's batches use: "inference", as
    # rules/llamacpp.toml reads their failure
    "llama.cpp": [
        Stage("weights-load", ("llama_model_loader", "llm_load_print_meta", "print_info", "llm_load_tensors",
                               "load_tensors", "llama_model_load", "load_all_data", "llm_load_hparams",
                               "load_hparams", "llm_load_vocab", "load_vocab"), ("src/*.cpp",)),
        Stage("kv-cache-alloc", ("llama_kv_cache_init", "llama_kv_cache_unified", "llama_kv_cache",
                                 "llama_new_context_with_model", "llama_context"), ("src/*.cpp",),
              then="inference", work=("ggml_backend_alloc_ctx_tensors_from_buft", "ggml_backend_sched_reserve",
                                      "graph_reserve", "sched_reserve")),
        Stage("inference", ("sched_reserve", "llama_decode_internal", "llama_decode_impl", "decode"),
              ("src/*.cpp",)),
    ],
    "uvicorn": [
        # the HTTP server every Python inference server runs: it listens once the app started
        Stage("inference", ("startup", "_log_started_message", "_serve"),
              ("uvicorn/server.py", "uvicorn/config.py", "uvicorn/lifespan/on.py")),
    ],
    "sglang": [
        Stage("weights-load", ("load_model",), ("sglang/srt/model_executor/model_runner.py",),
              then="kv-cache-alloc", paths=("/sglang/srt/model_loader/",)),
        Stage("kv-cache-alloc", ("init_memory_pool", "profile_max_num_token", "_create_buffers"), _SGL,
              then="cudagraph-capture"),
        Stage("cudagraph-capture", ("init_cuda_graphs", "capture_one_batch_size"), _SGL, then="inference"),
        Stage("inference", ("forward_batch_generation", "run_batch", "event_loop_normal", "event_loop_overlap",
                            "forward_extend", "forward_decode", "forward_thread_func", "forward_thread_func_",
                            "process_batch_result", "log_prefill_stats", "log_decode_stats"), _SGL),
    ],
    "transformers": [
        Stage("weights-load", ("from_pretrained", "_load_pretrained_model", "_load_state_dict_into_meta_model",
                               "load_sharded_checkpoint"), ("transformers/modeling_utils.py",)),
        # evaluation_loop and prediction_step run Trainer.evaluate (inside training) and
        # Trainer.predict (inference) alike: what they print tells neither
        Stage(SHARED, ("evaluation_loop", "prediction_step"), ("transformers/trainer.py",)),
        Stage("training", ("_inner_training_loop", "training_step", "compute_loss",
                           "_maybe_log_save_evaluate", "_save_checkpoint"),
              ("transformers/trainer.py", "transformers/trainer_seq2seq.py"),
              paths=("/transformers/trainer.py", "/transformers/trainer_pt_utils.py",
                     "/transformers/trainer_seq2seq.py")),
        Stage("inference", ("generate", "_sample", "_greedy_search", "_beam_search", "_assisted_decoding"),
              ("transformers/generation/utils.py",)),
    ],
    "accelerate": [
        Stage("weights-load", ("load_checkpoint_and_dispatch", "dispatch_model", "load_checkpoint_in_model"),
              ("accelerate/big_modeling.py", "accelerate/utils/modeling.py")),
        Stage("training", ("_prepare_deepspeed", "backward"), ("accelerate/accelerator.py",),
              paths=("/accelerate/accelerator.py", "/accelerate/optimizer.py")),
    ],
    "lightning": [
        Stage("training", ("_run_stage", "_fit_impl", "optimizer_step", "training_step", "backward"),
              ("lightning/pytorch/trainer/*.py", "lightning/pytorch/loops/**/*.py",
               "lightning/pytorch/strategies/strategy.py"),
              paths=("/lightning/pytorch/loops/", "/lightning/pytorch/trainer/")),
    ],
    "trl": [
        Stage("training", ("training_step", "compute_loss", "_generate_and_score_completions"),
              ("trl/trainer/*.py",), paths=("/trl/trainer/",)),
    ],
    "peft": [
        Stage("weights-load", ("from_pretrained", "load_adapter", "inject_adapter", "_create_and_replace"),
              ("peft/peft_model.py", "peft/tuners/tuners_utils.py")),
    ],
    "diffusers": [
        Stage("weights-load", ("from_pretrained", "load_model_dict_into_meta", "_load_pretrained_model"),
              ("diffusers/models/modeling_utils.py", "diffusers/pipelines/pipeline_utils.py",
               "diffusers/models/model_loading_utils.py")),
    ],
    "torchtune": [
        Stage("weights-load", ("load_checkpoint",), ("torchtune/training/checkpointing/*.py",)),
        Stage("training", ("train",), ("recipes/*.py",), paths=("/torchtune/training/",)),
    ],
    "flax": [
        Stage("training", ("apply_gradients",), ("flax/training/train_state.py",)),
    ],
    "keras": [
        Stage("training", ("train_step", "one_step_on_data", "make_train_function"),
              ("keras/src/backend/*/trainer.py",)),
        Stage("inference", ("predict_step", "make_predict_function"), ("keras/src/backend/*/trainer.py",)),
    ],
    # DeepSpeed (its sdist: no wheel on PyPI): ZeRO-3's partitioned construction of the model
    # (zero.Init) and checkpoint loading are the weights' loading; the engine's set-up (ZeRO's
    # partitioning of the optimizer state), its step and backward, the pipeline engine's
    # schedule and checkpoint saving are the training step; the inference engine serves
    "deepspeed": [
        # (not _convert_to_deepspeed_param: the gather and partition methods it attaches to each
        # parameter run in every ZeRO-3 training step too)
        Stage("weights-load", ("_post_init_method", "_zero_init_param", "_convert_to_zero_parameters"),
              ("deepspeed/runtime/zero/partition_parameters.py",)),
        Stage("weights-load", ("load_checkpoint", "_load_checkpoint", "_load_zero_checkpoint",
                               "load_model_with_checkpoint", "_apply_injection_policy"),
              ("deepspeed/runtime/engine.py", "deepspeed/inference/engine.py",
               "deepspeed/module_inject/load_checkpoint.py")),
        Stage("training", ("_configure_distributed_model", "_configure_optimizer", "_configure_zero_optimizer",
                           "backward", "step", "_take_model_step", "allreduce_gradients", "save_checkpoint",
                           "_save_checkpoint", "_save_zero_checkpoint", "train_batch", "_exec_forward_pass",
                           "_exec_backward_pass", "_exec_optimizer_step"),
              ("deepspeed/runtime/engine.py", "deepspeed/runtime/pipe/engine.py"),
              paths=("/deepspeed/runtime/engine.py", "/deepspeed/runtime/pipe/", "/deepspeed/runtime/fp16/",
                     "/deepspeed/runtime/bf16_optimizer.py", "/deepspeed/runtime/zero/stage3.py",
                     "/deepspeed/runtime/zero/stage_1_and_2.py", "/deepspeed/runtime/activation_checkpointing/")),
        Stage("inference", (), ("deepspeed/inference/engine.py",),
              paths=("/deepspeed/inference/engine.py", "/deepspeed/model_implementations/")),
    ],
    # llama-cpp-python (its sdist): Llama.generate prints "Llama.generate: N prefix-match hit" as a
    # request's prompt is matched against the cache (0.1.x printed no count)
    "llama_cpp_python": [
        Stage("inference", ("generate", "create_completion", "_create_completion", "create_chat_completion"),
              ("llama_cpp/llama.py",)),
    ],
    # ai-models ("a package to run AI weather models"): every module of it runs a forecast
    "ai_models": [
        Stage("inference", (), ("ai_models/*.py",), paths=("/ai_models/",)),
    ],
    # MONAI: its inferers run a trained network over a volume; its trainer's iterations train
    "monai": [
        Stage("inference", ("sliding_window_inference",), ("monai/inferers/*.py",), paths=("/monai/inferers/",)),
        Stage("training", (), ("monai/engines/trainer.py",), paths=("/monai/engines/trainer.py",)),
    ],
    # ms-swift: its train commands (swift/llm/train/ up to 3.x) and trainers, and its infer command
    "ms_swift": [
        Stage("training", ("sft_main", "rlhf_main", "pt_main", "train"), ("swift/llm/train/*.py",),
              paths=("/swift/llm/train/", "/swift/trainers/", "/swift/rlhf_trainers/")),
        Stage("inference", ("infer_main",), ("swift/llm/infer/*.py",), paths=("/swift/llm/infer/",)),
    ],
    "faster_whisper": [
        Stage("inference", ("transcribe", "generate_segments", "generate_with_fallback"),
              ("faster_whisper/transcribe.py",)),
    ],
    # bitsandbytes: its quantized parameters quantize as they are moved onto the device
    # (Params4bit.to/.cuda -> _quantize, Int8Params likewise, Linear8bitLt.to): placing the weights
    "bitsandbytes": [
        Stage("weights-load", ("to", "cuda", "xpu", "_quantize"), ("bitsandbytes/nn/modules.py",), qualified=True),
    ],
    # ComfyUI (its repository: not on PyPI): execution.py runs a queued prompt's nodes, the
    # generation a user asked for (a loader node's own frames, asked first, say weights-load)
    "comfyui": [
        Stage("inference", (), ("ComfyUI/execution.py",), paths=("/ComfyUI/execution.py",)),
    ],
    # AMD Quark (amd-quark; the wheel's quark/): ModelQuantizer.quantize_model quantizes a model
    # after training by running it forward over calibration data ("Calibration start.", the
    # "Calibrating activations" bar): a forward pass, "inference". Its functions' names are common
    # (quantize_model, _prepare_model), so they count in api.py only; the statistics observers of
    # observer.py run in those passes (the learnable ones of its QAT, lsq_observer.py and
    # tqt_observer.py, are left out: a training loop's own frames are asked before inference's)
    "amd_quark": [
        Stage("inference", ("quantize_model", "_do_calibration", "_calibrate_all_params", "_apply_advanced_quant_algo",
                            "_do_post_calib_optimization", "_do_post_calib_optimazation"),
              ("quark/torch/quantization/api.py",), qualified=True,
              paths=("/quark/torch/quantization/observer/observer.py",)),
    ],
    # OpenRLHF: the PPO roles it runs as Ray actors (policy, critic, reference and reward models)
    # train; its vLLM rollout actor (trainer/ray/vllm_engine.py) is vLLM's own stages
    "openrlhf": [
        Stage("training", (), ("openrlhf/trainer/ray/ppo_actor.py", "openrlhf/trainer/ray/ppo_critic.py",
                               "openrlhf/trainer/ray/launcher.py"), actors=True,
              paths=("/openrlhf/trainer/ray/ppo_actor.py", "/openrlhf/trainer/ray/ppo_critic.py")),
    ],
}

#: packages read as C++ (their log lines, not their frames: a C++ crash prints no Python traceback;
#: their functions are kept as frames for a backtrace that names them)
CPP = frozenset({"llama.cpp"})

#: names too common to tell a stage (a model's forward, an optimizer's step, a wrapper)
GENERIC = frozenset({
    "__init__", "__call__", "__enter__", "__exit__", "forward", "step", "run", "main", "wrapper", "inner",
    "apply", "to", "cuda", "setup", "start", "update", "load", "save", "init", "call", "execute",
    "process", "get", "put", "build", "prepare", "train", "eval", "evaluate", "predict", "reset", "close",
    "log", "print", "sync", "synchronize", "barrier", "empty_cache", "capture", "backward", "generate",
    "from_pretrained", "load_state_dict", "state_dict", "load_model", "load_weights", "startup", "_serve",
    "decode", "encode",
})
#: roots kept as frames although generic above: the hand table and tracebacks name them so,
#: and they are only ever stage functions in the packages listed (a traceback is a whole chain)
ROOT_OK = frozenset({"load_model", "load_weights", "from_pretrained", "generate", "backward"})

_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t)?[diouxXeEfFgGcrsa%]|\{[^{}]*\}")
_DONE = re.compile(r"\b(?:took|takes|taken|finished|finish|completed?|done|end|loaded|ready)\b", re.I)
#: progress is what a stage says it is doing: its info lines (warnings, deprecations and errors
#: are printed where a condition holds, not as the stage goes)
_LOG_METHODS = {"info", "info_once"}
#: a progress piece is cut to this many characters (at a word's end): a line is told by its start
PIECE_CHARS = 60


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in v.split("."))


def _fmt_pieces(node: ast.AST) -> list[str] | None:
    """The literal pieces of a logged message: a string, an f-string, ``"..." % x``,
    ``"...".format(x)``, a sum of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _SPEC.split(node.value)
    if isinstance(node, ast.JoinedStr):
        out: list[str] = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.append(v.value)
            else:
                out.append("\0")
        return "".join(out).split("\0")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _fmt_pieces(node.left)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fmt_pieces(node.left), _fmt_pieces(node.right)
        return [*(left or ["\0"]), *(right or ["\0"])]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"):
        return _fmt_pieces(node.func.value)
    return None


def _piece(pieces: list[str]) -> str | None:
    """The longest literal piece of a message that can identify its line, or None."""
    # the message's own start where it is literal, else its longest piece that starts a phrase
    # (a piece after a value, "GiB allocated", "] due to ...", names no line on its own)
    parts = [part.strip(" \t:=,;([") for p in pieces for part in p.split("\n")]
    best = parts[0] if parts and pieces[0].strip() else ""
    if best and not _usable(best) and len(pieces) > 1:
        # a short name, a value, then words ("Llama.generate: {n} prefix-match hit"): both
        # (its first clause: releases add clauses after a comma, llama-cpp-python 0.2's
        # "prefix-match hit, remaining N prompt tokens to eval" to 0.1's "prefix-match hit")
        after = pieces[1].split("\n")[0].split(", ")[0].strip(" \t:=,;([")
        if len(after) > PIECE_CHARS:
            after = after[: after.rfind(" ", 0, PIECE_CHARS + 1)].rstrip(" \t:=,;([")
        joined = f"{pieces[0].split(chr(10))[0].strip()} … {after}"
        if after[:1].isalpha() and len(after.split()) >= 2 and _usable(joined.replace(" … ", " ")):
            return joined
    if not _usable(best):
        best = max((p for p in parts if p[:1].isalpha() and p[:1].isupper()), key=len, default="")
    if len(best) > PIECE_CHARS:
        best = best[: best.rfind(" ", 0, PIECE_CHARS + 1)].rstrip(" \t:=,;([")
    return best if _usable(best) else None


def _usable(piece: str) -> bool:
    """Whether a literal piece can tell its line: three words or 16 characters, of letters mostly,
    starting as a phrase does (not "-- num_tokens", not a two-word "Weight cache")."""
    if not piece[:1].isalnum() and piece[:1] not in "#*":
        return False
    return (len(piece.split()) >= 3 or len(piece) >= 16) and " " in piece and sum(c.isalpha() for c in piece) >= 8


def _logged(call: ast.Call) -> ast.AST | None:
    """The message of a logging call (``logger.info(msg, ...)``, ``print(msg)``), or a progress
    bar's ``desc=``; None for any other call."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in _LOG_METHODS:
        owner = f.value
        name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
        if "log" in name.lower() and call.args:
            return call.args[0]
    if isinstance(f, ast.Name) and f.id == "print" and call.args:
        return call.args[0]
    for kw in call.keywords:
        if kw.arg == "desc":
            return kw.value
    return None


def _helper_frame(name: str) -> bool:
    """Whether a method a stage's root calls may name the stage as a frame: a private one
    (``_name``, not dunder) of two words or more; a public or one-word name (``encode``,
    ``_sample``) is too common among the packages a traceback passes through."""
    return name.startswith("_") and not name.startswith("__") and "_" in name[1:] and name not in GENERIC


def _is_log_stmt(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` only logs or returns (a condition around logging only counts)."""
    if isinstance(stmt, ast.Return | ast.Pass):
        return True
    if isinstance(stmt, ast.If):
        return all(_is_log_stmt(s) for s in [*stmt.body, *stmt.orelse])
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    f = stmt.value.func
    owner = f.value if isinstance(f, ast.Attribute) else None
    name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
    return "log" in name.lower() or _logged(stmt.value) is not None


@dataclass
class Found:
    """What one release says of one phase: evidence -> (kind, file)."""

    phase: str
    kind: str  # frame | path | progress | process
    evidence: str
    source: str


def _functions(tree: ast.Module) -> Iterator[tuple[str | None, ast.FunctionDef | ast.AsyncFunctionDef, dict[str, ast.AST]]]:
    """Each function of a module with its class (None at module level) and its class's methods."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield None, node, {}
        elif isinstance(node, ast.ClassDef):
            methods: dict[str, ast.AST] = {
                n.name: n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            for n in methods.values():
                assert isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                yield node.name, n, methods


def _ray_actors(tree: ast.Module) -> list[str]:
    """The classes of a module decorated ``@ray.remote`` or ``@ray.remote(...)``."""
    def is_remote(d: ast.expr) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        return (isinstance(d, ast.Attribute) and d.attr == "remote"
                and isinstance(d.value, ast.Name) and d.value.id == "ray")
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef) and any(is_remote(d) for d in n.decorator_list)]


def _self_calls(fn: ast.AST, methods: dict[str, ast.AST]) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
                and node.func.attr in methods):
            out.add(node.func.attr)
    return out


def _called(stmt: ast.AST) -> set[str]:
    """The names of the functions and methods ``stmt`` calls."""
    out = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name:
                out.add(name)
    return out


def _works(called: set[str], work: frozenset[str]) -> bool:
    """Whether calls of ``called`` do a stage's work: a stage function, a method of the root's
    class, or another object's private method (vLLM's ``worker.model_runner._dummy_run``)."""
    return bool(called & work) or any(n.startswith("_") and not n.startswith("__") for n in called)


def _lines_of(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, stage: Stage, work: frozenset[str] | None
) -> Iterator[tuple[str, str]]:
    """(piece, phase) for each progress line ``fn`` prints. In a root (``work``: the names of the
    stage functions and of its class's methods), a line printed after its last call of one of them
    reports what the stage did: it is over (see :func:`_works`)."""
    tail_from = len(fn.body)
    if work is not None:
        while tail_from and not _works(_called(fn.body[tail_from - 1]), work):
            tail_from -= 1
    tail = {id(s) for s in fn.body[tail_from:]} if work is not None and tail_from else set()
    # a message built first and logged by name (uvicorn's ``message = "Started server process [%d]"``)
    named: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            named.setdefault(node.targets[0].id, []).append(node.value)
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            msg = _logged(node)
            if isinstance(msg, ast.Name):
                for value in named.get(msg.id, ()):
                    yield from _line_phase(value, stage, id(stmt) in tail)
                continue
            if msg is not None:
                yield from _line_phase(msg, stage, id(stmt) in tail)


def _line_phase(msg: ast.AST, stage: Stage, last: bool) -> Iterator[tuple[str, str]]:
    """(piece, phase) of one logged message of ``stage`` (``last``: printed after its root's
    last call of a stage function)."""
    pieces = _fmt_pieces(msg)
    piece = _piece(pieces) if pieces else None
    if piece is None or pieces is None:
        return
    done = stage.reports or bool(_DONE.search("".join(pieces))) or last
    yield piece, (stage.then if done and stage.then else stage.phase)


_CPP_DEF = re.compile(r"^[A-Za-z_][^\n;{}()]*?\b(~?\w+)\s*\(", re.M)
_CPP_LOG = re.compile(r'LLAMA_LOG_INFO\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*__func__\b')
_CPP_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/|[{};]', re.S)


def _cpp_functions(text: str) -> Iterator[tuple[str, str]]:
    """(name, body) of each function defined at the start of a line of a C++ file (a method as
    ``Class::name``, a constructor as its class's name): what ``__func__`` prints."""
    for m in _CPP_DEF.finditer(text):
        depth, start = 0, None
        for t in _CPP_TOKEN.finditer(text, m.end()):
            tok = t.group()
            if tok == ";" and start is None:
                break  # a declaration
            if tok == "{":
                depth += 1
                start = t.end() if start is None else start
            elif tok == "}":
                depth -= 1
                if depth == 0 and start is not None:
                    yield m.group(1), text[start:t.start()]
                    break


def _cpp_lines(name: str, body: str, stage: Stage) -> Iterator[tuple[str, str]]:
    """(evidence, phase) for each info line a C++ stage function prints as ``"%s: ...", __func__``:
    the function's name and the message's first literal words, or "NAME: … PIECE" where a value
    comes first."""
    work = re.compile(r"\b(?:" + "|".join(stage.work) + r")\s*\(") if stage.work else None
    last_work = max((w.start() for w in work.finditer(body)), default=-1) if work else -1
    for log in _CPP_LOG.finditer(body):
        fmt = log.group(1)
        if not fmt.startswith("%s: "):
            continue
        pieces = [p.replace("\\n", " ").strip(" \t:=,;([") for p in _SPEC.split(fmt[4:])]
        lead = re.sub(r"\s+", " ", pieces[0]) if pieces else ""
        if lead:
            evidence = f"{name}: {lead}"
        else:
            longest = max((re.sub(r"\s+", " ", p) for p in pieces), key=len, default="")
            if not _usable(longest):
                continue
            evidence = f"{name}: … {longest}"
        if not _usable(evidence.replace(" … ", " ")):
            continue
        done = stage.then is not None and (bool(_DONE.search(fmt)) or (0 <= last_work < log.start()))
        yield evidence, (stage.then if done and stage.then else stage.phase)


def _read_cpp(root: Path, package: str) -> list[Found]:
    found: list[Found] = []
    for stage in STAGES[package]:
        for f in sorted({p for g in stage.files for p in root.glob(g) if p.is_file()}):
            rel = f.relative_to(root).as_posix()
            for name, body in _cpp_functions(f.read_text(encoding="utf-8", errors="replace")):
                if name not in stage.roots:
                    continue
                if name not in GENERIC:
                    found.append(Found(stage.phase, "frame", name, rel))
                found += [Found(phase, "progress", evidence, rel) for evidence, phase in _cpp_lines(name, body, stage)]
    return found


def read_release(root: Path, package: str) -> list[Found]:
    """The phase evidence of one unpacked release."""
    if package in CPP:
        return _read_cpp(root, package)
    stages = STAGES[package]
    # (a qualified stage's roots are generic names: the other packages' calls of them are no stage's work)
    all_roots = {r for st in STAGES.values() for s in st if not s.qualified for r in s.roots}
    found: list[Found] = []
    helpers: dict[str, set[str]] = {}  # helper name -> phases reaching it
    helper_found: list[Found] = []
    trees: dict[Path, ast.Module] = {}
    for stage in stages:
        for path in stage.paths:
            rel = path.strip("/")
            if (root / rel).exists() or (root / (rel + ".py")).exists() or list(root.glob(rel)):
                found.append(Found(stage.phase, "path", path, rel))
        files = sorted({p for g in stage.files for p in root.glob(g) if p.is_file()})
        for f in files:
            if f not in trees:
                try:
                    with warnings.catch_warnings():  # (upstream's own invalid escapes)
                        warnings.simplefilter("ignore")
                        trees[f] = ast.parse(f.read_text(encoding="utf-8"))
                except (SyntaxError, UnicodeDecodeError):
                    continue
            rel = f.relative_to(root).as_posix()
            if stage.actors:
                found += [Found(stage.phase, "process", name, rel) for name in _ray_actors(trees[f])]
            for _cls, fn, methods in _functions(trees[f]):
                if fn.name not in stage.roots:
                    continue
                if stage.qualified:
                    found.append(Found(stage.phase, "frame", f"/{rel}::{fn.name}", rel))
                    found += [Found(ph, "progress", piece, rel) for piece, ph in _lines_of(fn, stage, work=None)]
                    continue
                if fn.name not in GENERIC or fn.name in ROOT_OK:
                    found.append(Found(stage.phase, "frame", fn.name, rel))
                for piece, phase in _lines_of(fn, stage, work=frozenset(all_roots | set(methods))):
                    found.append(Found(phase, "progress", piece, rel))
                for name in sorted(_self_calls(fn, methods)):
                    if not _helper_frame(name) or name in all_roots:
                        continue
                    helpers.setdefault(name, set()).add(stage.phase)
                    helper_found.append(Found(stage.phase, "frame", name, rel))
                    h = methods[name]
                    assert isinstance(h, ast.FunctionDef | ast.AsyncFunctionDef)
                    inner = Stage(stage.phase, (), (), then=stage.then, reports=stage.reports)
                    for piece, phase in _lines_of(h, inner, work=None):
                        helper_found.append(Found(phase, "progress", piece, rel))
    found += [f for f in helper_found if f.kind != "frame" or len(helpers[f.evidence]) == 1]
    return found


def _group_cpp_lines(table: dict[tuple[str, str, str], dict[tuple[str, str], set[str]]]) -> None:
    """A C++ function every line of which, in every release, names one phase (llama.cpp's
    ``llm_load_print_meta`` and its dozens of hyper-parameters) is told by its name, which starts
    each of its lines: one entry ``NAME:`` stands for them."""
    by_func: dict[str, list[tuple[str, str, str]]] = {}
    for key, where in table.items():
        _phase, kind, ev = key
        m = re.match(r"(\w+): ", ev)
        if kind == "progress" and m and any(pkg in CPP for pkg, _ in where):
            by_func.setdefault(m.group(1), []).append(key)
    for func, keys in by_func.items():
        if len(keys) < 3 or len({k[0] for k in keys}) != 1:
            continue
        merged: dict[tuple[str, str], set[str]] = {}
        for k in keys:
            for where, versions in table.pop(k).items():
                merged.setdefault(where, set()).update(versions)
        table[(keys[0][0], "progress", f"{func}:")] = merged


def generate(releases: list[Path]) -> str:
    """The TOML of the table read from ``releases`` (folders ``<package>-<version>``; those of
    other packages are left out)."""
    releases = [r for r in releases if r.name.rpartition("-")[0].replace("-", "_") in STAGES]
    # (phase, kind, evidence) -> {(package, source): [versions]}
    table: dict[tuple[str, str, str], dict[tuple[str, str], set[str]]] = {}
    for rel in sorted(releases):
        package, _, version = rel.name.rpartition("-")
        if package.replace("-", "_") not in STAGES:
            continue
        package = package.replace("-", "_")
        for f in read_release(rel, package):
            table.setdefault((f.phase, f.kind, f.evidence), {}).setdefault((package, f.source), set()).add(version)
    _group_cpp_lines(table)
    # evidence two phases claim tells neither
    claims: dict[tuple[str, str], set[str]] = {}
    for phase, kind, ev in table:
        claims.setdefault((kind, ev.lower()), set()).add(phase)
    dropped = sorted(f"{kind} {ev!r}" for (kind, ev), phases in claims.items() if len(phases) > 1)
    out = [
        "# Phase evidence read from the upstream sources by tools/gen_phase_table.py: do not edit by hand.",
        "# Regenerate (README, \"Phase evidence\"): tools/fetch_phase_sources.sh DEST &&",
        "#   python tools/gen_phase_table.py DEST > rules/phases.generated.toml",
        "# Releases read: " + ", ".join(sorted(r.name for r in releases)),
    ]
    if dropped:
        out.append("# Dropped, claimed by two phases: " + "; ".join(dropped))
    for phase in ORDER:
        entries = sorted((k, ev) for (ph, k, ev) in table if ph == phase and len(claims[(k, ev.lower())]) == 1)
        if not entries:
            continue
        frames = [ev for k, ev in entries if k == "frame"]
        paths = [ev for k, ev in entries if k == "path"]
        progress = [ev for k, ev in entries if k == "progress"]
        processes = [ev for k, ev in entries if k == "process"]
        out += ["", "[[phase]]", f"phase = {json.dumps(phase)}"]
        out.append(f"frames = {json.dumps(frames)}")
        if paths:
            out.append(f"paths = {json.dumps(paths)}")
        if processes:
            out.append(f"processes = {json.dumps(processes)}")
        if progress:
            out.append("progress = [")
            out += [f"  {_toml_literal('.*?'.join(_escape(x) for x in p.split(' … ')))}," for p in progress]
            out.append("]")
            out.append(f"triggers = {json.dumps(sorted({max(p.split(' … '), key=len).lower() for p in progress}))}")
        for k, ev in entries:
            for (package, source), versions in sorted(table[(phase, k, ev)].items()):
                vs = sorted(versions, key=_version_key)
                out.append("[[phase.origins]]")
                out.append(f"kind = {json.dumps(k)}")
                out.append(f"evidence = {json.dumps(ev)}")
                out.append(f"package = {json.dumps(package)}")
                out.append(f"source = {json.dumps(source)}")
                out.append(f"versions = {json.dumps(vs)}")
    return "\n".join(out) + "\n"


def _escape(text: str) -> str:
    """``text`` as a regex matching it literally (only the characters that need it escaped)."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


def _toml_literal(s: str) -> str:
    if "'''" not in s and not s.endswith("'"):
        return f"'''{s}'''"
    return json.dumps(s)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    base = Path(argv[0])
    releases = [p for p in base.iterdir() if p.is_dir() and not p.name.endswith(".part")]
    sys.stdout.write(generate(releases))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
