"""Commands rebuilt from dumps of every launch argument (vLLM's ``args: Namespace(...)``, SGLang's
``server_args=ServerArgs(...)``): only what differs from that version's defaults is carried; the
defaults per release come from the engines' own parsers (``tools/gen_engine_args.py``)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from oomdoctor.advisor.command import argv_from_dump
from oomdoctor.advisor.engine_args import UNKNOWN_DEFAULT, default_of, flag_of_dest
from oomdoctor.api import diagnose
from oomdoctor.context import parse_key_values

ROOT = Path(__file__).resolve().parents[1]

# vLLM 0.6.6's `vllm serve` prints every argument, defaults included, as api_server.py logs it; this
# one ran `vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 -tp 2
# --gpu-memory-utilization 0.95` (no fixture in the corpus carries a Namespace dump)
NAMESPACE_066 = (
    "INFO 12-20 10:00:01 api_server.py:713] args: Namespace(subparser='serve', "
    "model_tag='meta-llama/Llama-3.1-8B-Instruct', config='', host=None, port=8000, uvicorn_log_level='info', "
    "allow_credentials=False, allowed_origins=['*'], allowed_methods=['*'], allowed_headers=['*'], api_key=None, "
    "lora_modules=None, prompt_adapters=None, chat_template=None, chat_template_content_format='auto', "
    "response_role='assistant', ssl_keyfile=None, ssl_certfile=None, ssl_ca_certs=None, ssl_cert_reqs=0, "
    "root_path=None, middleware=[], return_tokens_as_token_ids=False, disable_frontend_multiprocessing=False, "
    "enable_request_id_headers=False, enable_auto_tool_choice=False, tool_call_parser=None, tool_parser_plugin='', "
    "model='meta-llama/Llama-3.1-8B-Instruct', task='auto', tokenizer=None, skip_tokenizer_init=False, "
    "revision=None, code_revision=None, tokenizer_revision=None, tokenizer_mode='auto', trust_remote_code=False, "
    "allowed_local_media_path=None, download_dir=None, load_format='auto', "
    "config_format=<ConfigFormat.AUTO: 'auto'>, dtype='auto', kv_cache_dtype='auto', "
    "quantization_param_path=None, max_model_len=32768, guided_decoding_backend='xgrammar', "
    "logits_processor_pattern=None, distributed_executor_backend=None, worker_use_ray=False, "
    "pipeline_parallel_size=1, tensor_parallel_size=2, max_parallel_loading_workers=None, "
    "ray_workers_use_nsight=False, block_size=None, enable_prefix_caching=None, disable_sliding_window=False, "
    "use_v2_block_manager=True, num_lookahead_slots=0, seed=0, swap_space=4, cpu_offload_gb=0, "
    "gpu_memory_utilization=0.95, num_gpu_blocks_override=None, max_num_batched_tokens=None, max_num_seqs=None, "
    "max_logprobs=20, disable_log_stats=False, quantization=None, rope_scaling=None, rope_theta=None, "
    "hf_overrides=None, enforce_eager=False, max_seq_len_to_capture=8192, disable_custom_all_reduce=False, "
    "tokenizer_pool_size=0, tokenizer_pool_type='ray', tokenizer_pool_extra_config=None, limit_mm_per_prompt=None, "
    "mm_processor_kwargs=None, disable_mm_preprocessor_cache=False, enable_lora=False, enable_lora_bias=False, "
    "max_loras=1, max_lora_rank=16, lora_extra_vocab_size=256, lora_dtype='auto', long_lora_scaling_factors=None, "
    "max_cpu_loras=None, fully_sharded_loras=False, enable_prompt_adapter=False, max_prompt_adapters=1, "
    "max_prompt_adapter_token=0, device='auto', num_scheduler_steps=1, multi_step_stream_outputs=True, "
    "scheduler_delay_factor=0.0, enable_chunked_prefill=None, speculative_model=None, "
    "speculative_model_quantization=None, num_speculative_tokens=None, speculative_disable_mqa_scorer=False, "
    "speculative_draft_tensor_parallel_size=None, speculative_max_model_len=None, "
    "speculative_disable_by_batch_size=None, ngram_prompt_lookup_max=None, ngram_prompt_lookup_min=None, "
    "spec_decoding_acceptance_method='rejection_sampler', typical_acceptance_sampler_posterior_threshold=None, "
    "typical_acceptance_sampler_posterior_alpha=None, disable_logprobs_during_spec_decoding=None, "
    "model_loader_extra_config=None, ignore_patterns=[], preemption_mode=None, served_model_name=None, "
    "qlora_adapter_name_or_path=None, otlp_traces_endpoint=None, collect_detailed_traces=None, "
    "disable_async_output_proc=False, scheduling_policy='fcfs', override_neuron_config=None, "
    "override_pooler_config=None, compilation_config=None, kv_transfer_config=None, worker_cls='auto', "
    "generation_config=None, disable_log_requests=False, max_log_len=None, disable_fastapi_docs=False, "
    "enable_prompt_tokens_details=False, dispatch_function=<function serve at 0x7f8b2c0e5d80>)"
)


def _namespace_args() -> dict[str, str]:
    return parse_key_values(NAMESPACE_066.split("Namespace(", 1)[1][:-1])


def test_defaults_per_release_come_from_the_parsers() -> None:
    # CacheConfig.gpu_memory_utilization: 0.9 up to 0.19, Field(default=0.92) in 0.27, None in 0.34
    assert default_of("vllm", "--gpu-memory-utilization", "0.6.6") == "0.9"
    assert default_of("vllm", "--gpu-memory-utilization", "0.27.0") == "0.92"
    assert default_of("vllm", "--gpu-memory-utilization", None) == "None"  # unknown version: the newest
    assert default_of("vllm", "--enforce-eager", "0.6.6") == "False"  # store_true
    assert default_of("vllm", "--swap-space", "0.6.6") == "4"
    assert default_of("vllm", "--ssl-cert-reqs", "0.6.6") == "0"  # int(ssl.CERT_NONE)
    # between two samples that disagree the default is not known
    assert default_of("vllm", "--gpu-memory-utilization", "0.20.0") == UNKNOWN_DEFAULT
    assert default_of("sglang", "--tp-size", "0.4.6") == "1"  # default=ServerArgs.tp_size
    assert default_of("sglang", "--chunked-prefill-size", "0.3.6") == "8192"
    assert default_of("sglang", "--chunked-prefill-size", "0.4.6") == "None"
    assert flag_of_dest("vllm", "max_model_len") == "--max-model-len"
    assert flag_of_dest("sglang", "fp8_gemm_runner_backend") == "--fp8-gemm-backend"  # dest=


def test_namespace_dump_keeps_only_what_the_user_changed() -> None:
    argv = argv_from_dump("vllm", _namespace_args(), "0.6.6")
    assert argv == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "32768",
                    "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.95"]


def test_a_dump_from_another_release_gives_no_command() -> None:
    # arguments of 0.6.6 set where 0.34 has no such flag (use_v2_block_manager=True): not expressible
    assert argv_from_dump("vllm", _namespace_args(), None) is None
    # between 0.19.1 and 0.27.0 the default of --gpu-memory-utilization is not known
    assert argv_from_dump("vllm", {"model": "m", "gpu_memory_utilization": "0.9"}, "0.20.0") is None


def test_the_same_value_is_a_default_in_one_release_and_a_choice_in_another() -> None:
    args = {"model": "m", "gpu_memory_utilization": "0.9", "max_model_len": "4096", "enforce_eager": "False"}
    assert argv_from_dump("vllm", args, "0.6.6") == ["vllm", "serve", "m", "--max-model-len", "4096"]
    assert argv_from_dump("vllm", args, "0.34.0") == [
        "vllm", "serve", "m", "--gpu-memory-utilization", "0.9", "--max-model-len", "4096"]


def test_namespace_dump_gives_the_corrected_command() -> None:
    oom = (ROOT / "fixtures/vllm/synthetic-v0-worker-capture-oom.log").read_text(encoding="utf-8").splitlines()[4:]
    log = "\n".join(["INFO 12-20 10:00:00 api_server.py:712] vLLM API server version 0.6.6", NAMESPACE_066, *oom])
    report = diagnose(log + "\n")
    assert report.context.engine_version == "0.6.6"
    top = report.findings[0].remedies[0]
    assert top.flags == {"--gpu-memory-utilization": "0.90"}
    assert top.command == ("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 "
                           "--tensor-parallel-size 2 --gpu-memory-utilization 0.90")


@pytest.mark.parametrize(("fixture", "command"), [
    ("synthetic-cuda-graph-oom.log",
     # SGLang's own first answer to a failed capture: a smaller static fraction
     "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --mem-fraction-static 0.85 "
     "--tp-size 4"),
    ("synthetic-not-enough-memory.log",
     "python -m sglang.launch_server --model-path Qwen/Qwen2.5-32B-Instruct --mem-fraction-static 0.83 "
     "--chunked-prefill-size 8192"),
])
def test_server_args_dump_gives_the_corrected_command(fixture: str, command: str) -> None:
    report = diagnose((ROOT / "fixtures/sglang" / fixture).read_text(encoding="utf-8"))
    assert report.findings[0].remedies[0].command == command


def test_server_args_defaults_are_dropped() -> None:
    line = next(ln for ln in (ROOT / "fixtures/sglang/synthetic-healthy-startup.log").read_text().splitlines()
                if "ServerArgs(" in ln)
    args = parse_key_values(line.split("ServerArgs(", 1)[1][:-1])
    assert args["tp_size"] == "1" and args["disable_cuda_graph"] == "False"
    # tp_size=1, disable_cuda_graph=False and the None values are SGLang's defaults; the rest was set
    assert argv_from_dump("sglang", args, None) == [
        "python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
        "--tokenizer-path", "meta-llama/Llama-3.1-8B-Instruct", "--mem-fraction-static", "0.88",
        "--chunked-prefill-size", "8192", "--cuda-graph-max-bs", "160"]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_engine_args", ROOT / "tools/gen_engine_args.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_generator_reads_each_kind_of_default(tmp_path: Path) -> None:
    src = tmp_path / "vllm-9.9.9" / "vllm" / "engine"
    src.mkdir(parents=True)
    (src / "arg_utils.py").write_text(textwrap.dedent('''
        import ssl
        from dataclasses import dataclass, field
        LIMIT = 7

        @dataclass
        class CacheConfig:
            gpu_memory_utilization: float = 0.9
            sizes: list[int] = field(default_factory=list)
            eager: bool = False
            computed: int = field(default_factory=lambda: 3)

        @dataclass
        class EngineArgs:
            swap_space: float = 4
            dtype: str = "auto"

            @staticmethod
            def add_cli_args(parser):
                cache_kwargs = get_kwargs(CacheConfig)
                parser.add_argument("--swap-space", type=float, default=EngineArgs.swap_space)
                parser.add_argument("--dtype", default=EngineArgs.dtype)
                parser.add_argument("--limit", type=int, default=LIMIT)
                parser.add_argument("--ssl-cert-reqs", type=int, default=int(ssl.CERT_NONE))
                parser.add_argument("--enforce-eager", action="store_true")
                parser.add_argument("--no-stats", action="store_false", dest="stats")
                parser.add_argument("--seed", type=int)
                parser.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
                parser.add_argument("--sizes", **cache_kwargs["sizes"])
                parser.add_argument("--eager", **cache_kwargs["eager"])
                parser.add_argument("--computed", **cache_kwargs["computed"])
                parser.add_argument("--host", default=socket.gethostname())
        '''), encoding="utf-8")
    data = _generator().build("vllm", [tmp_path / "vllm-9.9.9"])
    got = {flag: rec["defaults"][0][2] for flag, rec in data["flags"].items()}
    assert got == {
        "--swap-space": "4", "--dtype": "auto", "--limit": "7", "--ssl-cert-reqs": "0",
        "--enforce-eager": "False", "--no-stats": "True", "--seed": "None",
        "--gpu-memory-utilization": "0.9", "--sizes": "[]", "--eager": "False",
        "--computed": None, "--host": None,  # computed at run time: unknown
    }
    assert data["flags"]["--no-stats"]["dest"] == "stats"
