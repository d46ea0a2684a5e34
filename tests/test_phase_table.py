"""The phase evidence generated from the upstream sources (``rules/phases.generated.toml``,
``tools/gen_phase_table.py``): it loads, every entry names the file and releases it was read from,
it is what the generator reads from the releases (when they are at hand), and the scanner names a
failure's phase from it."""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from oomdoctor.api import diagnose
from oomdoctor.cache import toml_module
from oomdoctor.rulepack.loader import PHASE_PRIORITY, default_pack, read_rule_file

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "rules" / "phases.generated.toml"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_phase_table", ROOT / "tools/gen_phase_table.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _releases_read() -> list[str]:
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line.startswith("# Releases read: "):
            return line.removeprefix("# Releases read: ").split(", ")
    raise AssertionError("the table names no releases")


def test_committed_table_loads_and_names_source_and_versions() -> None:
    rf = read_rule_file(TABLE)
    assert [p.phase for p in rf.phase] == [p for p in PHASE_PRIORITY if p in {q.phase for q in rf.phase}]
    releases = set(_releases_read())
    for ph in rf.phase:
        told = {(o.kind, o.evidence) for o in ph.origins}
        evidence = ({("frame", f) for f in ph.frames} | {("path", p) for p in ph.paths}
                    | {("process", p) for p in ph.processes})
        assert evidence <= told, f"{ph.phase}: no origin for {sorted(evidence - told)}"
        assert len(ph.progress) == len({e for k, e in told if k == "progress"})
        for o in ph.origins:
            assert o.source and o.versions
            assert not o.source.startswith("/"), o.source
            for v in o.versions:
                # a release the header lists, of the package the origin names
                assert any(r.replace("-", "_") == f"{o.package}-{v}".replace("-", "_") for r in releases), (o, v)
        for t in ph.triggers:
            assert t == t.lower()
    # every engine and framework the generator knows has evidence in the table
    packages = {o.package for ph in rf.phase for o in ph.origins}
    assert packages == set(_generator().STAGES)


def test_the_built_in_pack_merges_each_phase_once() -> None:
    pack = default_pack()
    names = [p.rule.phase for p in pack.phases]
    assert len(names) == len(set(names))
    assert names == sorted(names, key=PHASE_PRIORITY.index)
    # the generated frames and the hand-written ones are asked together
    capture = next(p for p in pack.phases if p.rule.phase == "cudagraph-capture")
    assert {"capture_one_batch_size", "capture_model"} <= capture.frames


def _sources() -> Path:
    env = os.environ.get("OOMDOCTOR_PHASE_SOURCES")
    return Path(env) if env else Path.home() / ".cache" / "oomdoctor" / "phase-sources"


def test_table_is_what_the_upstream_releases_say() -> None:
    """Regenerated from the releases (tools/fetch_phase_sources.sh) where they are at hand."""
    base = _sources()
    wanted = _releases_read()
    missing = [r for r in wanted if not (base / r).is_dir()]
    if missing:
        pytest.skip(f"the upstream releases are not at {base} (tools/fetch_phase_sources.sh; missing {missing[:3]})")
    got = _generator().generate([base / r for r in wanted])
    assert got == TABLE.read_text(encoding="utf-8"), (
        "rules/phases.generated.toml drifted from the upstream sources: "
        f"python tools/gen_phase_table.py {base} > rules/phases.generated.toml"
    )


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_generator_reads_stage_functions_helpers_and_lines(tmp_path: Path) -> None:
    gen = _generator()
    rel = tmp_path / "vllm-9.9.0"
    _write(rel, "vllm/v1/worker/gpu_model_runner.py", '''
        import logging
        logger = logging.getLogger(__name__)

        class GPUModelRunner:
            def load_model(self):
                logger.info("Starting to load model %s...", self.name)
                self.model = get_model()
                logger.info("Model loading took %.4f GiB", 1.0)
                self.prepare_communication()

            def profile_run(self):
                self._dummy_run(1)

            def capture_model(self):
                logger.info("Capturing CUDA graph shapes: %d", 3)
                self._capture_graphs_of_sizes()
                self._dummy_run(2)
                logger.warning("Capture may use memory you have not counted")
                logger.info(f"Graph capturing finished in {3} secs")

            def _capture_graphs_of_sizes(self):
                logger.info("Capturing one size of the graph pool")

            def _dummy_run(self, n):
                pass

            def forward(self):
                pass
        ''')
    text = gen.generate([rel])
    table = toml_module().loads(text)
    by = {p["phase"]: p for p in table["phase"]}
    assert "capture_model" in by["cudagraph-capture"]["frames"]
    # a private helper only one stage calls names it; one two stages call (_dummy_run) names none
    assert "_capture_graphs_of_sizes" in by["cudagraph-capture"]["frames"]
    assert all("_dummy_run" not in p["frames"] for p in table["phase"])
    assert all("forward" not in p["frames"] for p in table["phase"])
    # a line printed as the stage starts names it; one saying it is over names the stage after it
    assert "Capturing CUDA graph shapes" in by["cudagraph-capture"]["progress"]
    assert "Graph capturing finished in" in by["inference"]["progress"]
    assert "Model loading took" in by["profiling"]["progress"]
    assert "Starting to load model" in by["weights-load"]["progress"]
    # warnings are not progress
    assert not any("Capture may use" in p for ph in table["phase"] for p in ph.get("progress", []))
    origin = next(o for o in by["cudagraph-capture"]["origins"] if o["evidence"] == "capture_model")
    assert origin == {"kind": "frame", "evidence": "capture_model", "package": "vllm",
                      "source": "vllm/v1/worker/gpu_model_runner.py", "versions": ["9.9.0"]}


def test_generator_drops_a_line_two_stages_print(tmp_path: Path) -> None:
    gen = _generator()
    rel = tmp_path / "transformers-9.0.0"
    _write(rel, "transformers/trainer.py", '''
        import logging
        logger = logging.getLogger(__name__)

        class Trainer:
            def _inner_training_loop(self):
                logger.info("***** Running training *****")
                logger.info(f"  Number of examples = {n}")

            def evaluation_loop(self, description):
                logger.info(f"***** Running {description} *****")
                logger.info(f"  Number of examples = {n}")
        ''')
    table = toml_module().loads(gen.generate([rel]))
    training = next(p for p in table["phase"] if p["phase"] == "training")
    assert r"\*\*\*\*\* Running training \*\*\*\*\*" in training["progress"]
    assert not any("Number of examples" in p for ph in table["phase"] for p in ph.get("progress", []))
    assert "# Dropped, claimed by two phases: progress 'number of examples'" in gen.generate([rel])


def _phase(log: str) -> str:
    report = diagnose(textwrap.dedent(log).lstrip())
    assert report.findings, log
    return report.findings[0].phase


OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity "
    "of 79.11 GiB of which 200.00 MiB is free."
)


def test_sglang_progress_lines_from_the_table_name_the_phase() -> None:
    # sglang 0.4.6 model_runner.py: "Memory pool end" closes the KV pool, then capture begins
    assert _phase(f"""
        [2025-07-02 07:41:58 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=21.73 GB
        [2025-07-02 07:41:59 TP0] Memory pool end. avail mem=5.10 GB
        [2025-07-02 07:41:59 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=5.00 GB
        {OOM}
        """) == "cudagraph-capture"
    assert _phase(f"""
        [2025-07-02 07:41:58 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=21.73 GB
        {OOM}
        """) == "kv-cache-alloc"


def test_uvicorn_startup_line_means_serving() -> None:
    # uvicorn lifespan/on.py: printed once the app is up and listening
    assert _phase(f"""
        INFO:     Waiting for application startup.
        INFO:     Application startup complete.
        {OOM}
        """) == "inference"


def test_a_generated_frame_names_the_phase() -> None:
    # sglang cuda_graph_runner.py CudaGraphRunner.capture_one_batch_size
    assert _phase(f"""
        Traceback (most recent call last):
          File "/usr/lib/python3/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in capture_one_batch_size
            run_once()
          File "/usr/lib/python3/site-packages/sglang/srt/models/llama.py", line 90, in forward
            x = self.mlp(x)
        {OOM}
        """) == "cudagraph-capture"


def test_a_frame_line_a_terminal_wrapped_names_the_phase_by_its_whole_path() -> None:
    # vLLM 0.10.2 model_executor/warmup/ (a generated path of warmup), the frame line cut at the
    # terminal's width and its rest on the next line without the worker's prefix
    p = "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815] "
    log = (
        f'{p}  File "/usr/local/lib/python3.12/dist-packages/vllm/model_exe\n'
        'cutor/warmup/deep_gemm_warmup.py", line 262, in _warmup\n'
        f"{p}    out = torch.empty((MAX_M, n), device=device, dtype=torch.bfloat16)\n"
        f"{p}{OOM}\n"
    )
    assert diagnose(log).findings[0].phase == "warmup"
    # the same rest after an unrelated line is no frame of that path: no phase
    unrelated = log.replace("cutor/warmup/", "INFO other line\ncutor/warmup/", 1).replace("deep_gemm_warmup.py", "x.py")
    assert diagnose(unrelated).findings[0].phase == "unknown"


def test_generator_reads_llama_cpp_lines_by_the_function_printing_them(tmp_path: Path) -> None:
    gen = _generator()
    rel = tmp_path / "llama.cpp-b9999"
    _write(rel, "src/llama-context.cpp", r'''
        llama_context::llama_context(const llama_model & model, llama_context_params params) {
            LLAMA_LOG_INFO("%s: constructing llama_context\n", __func__);
            LLAMA_LOG_INFO("%s: n_ctx         = %u\n", __func__, cparams.n_ctx);
            memory.reset(model.create_memory(params_mem, cparams));
            auto * gf = graph_reserve(n_tokens, n_seqs, n_outputs, mctx.get());
            LLAMA_LOG_INFO("%s: %10s compute buffer size = %8.2f MiB\n", __func__, name, size);
        }

        static void llm_load_print_meta(llama_model_loader & ml, llama_model & model) {
            LLAMA_LOG_INFO("%s: format           = %s\n", __func__, "GGUF");
            LLAMA_LOG_INFO("%s: n_ctx_train      = %u\n", __func__, hparams.n_ctx_train);
            LLAMA_LOG_INFO("%s: n_embd           = %u\n", __func__, hparams.n_embd);
        }
        ''')
    table = toml_module().loads(gen.generate([rel]))
    by = {p["phase"]: p for p in table["phase"]}
    # lines before the reservation are the context's set-up (its KV cache); the compute buffers'
    # line, printed after it, names the stage after it
    assert "llama_context: n_ctx" in by["kv-cache-alloc"]["progress"]
    assert "llama_context:.*?compute buffer size" in by["inference"]["progress"]
    # a function whose every line names one phase is told by its name
    assert "llm_load_print_meta:" in by["weights-load"]["progress"]
    assert "llama_context" in by["kv-cache-alloc"]["frames"]


def test_llama_cpp_progress_lines_from_the_table_name_the_phase() -> None:
    failed = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4403.49 MiB on device 0: cudaMalloc failed: out of memory"
    # llama.cpp src/llama-model.cpp load_tensors, src/llama-context.cpp llama_context::llama_context
    assert _phase(f"""
        print_info: file format = GGUF V3 (latest)
        load_tensors: offloading 32 repeating layers to GPU
        {failed}
        """) == "weights-load"
    assert _phase(f"""
        load_tensors: offloaded 33/33 layers to GPU
        llama_context: constructing llama_context
        llama_context: n_ctx         = 131072
        {failed}
        """) == "kv-cache-alloc"


def test_a_tensorflow_gradient_node_at_the_graph_root_means_training() -> None:
    # TF1's tf.gradients names its ops under "gradients/" at the root scope by default
    assert _phase("""
        ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[64,2016,9,9] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc
             [[Node: gradients/cell_8/bn_sep_5x5_1/FusedBatchNorm_grad/FusedBatchNormGrad = FusedBatchNormGrad[T=DT_FLOAT]()]]
        """) == "training"


def test_generator_names_generic_roots_with_their_file_and_ray_actors(tmp_path: Path) -> None:
    gen = _generator()
    bnb = tmp_path / "bitsandbytes-9.0.0"
    _write(bnb, "bitsandbytes/nn/modules.py", """
        import torch

        class Params4bit(torch.nn.Parameter):
            def _quantize(self, device):
                return self

            def to(self, *args, **kwargs):
                return self._quantize(args[0])

        class Linear4bit(torch.nn.Linear):
            def forward(self, x):
                return x
        """)
    orl = tmp_path / "openrlhf-9.0.0"
    _write(orl, "openrlhf/trainer/ray/ppo_actor.py", """
        import ray

        class ActorPPOTrainer:
            pass

        @ray.remote(num_gpus=1)
        class PolicyModelActor(BasePPORole):
            pass
        """)
    _write(orl, "openrlhf/trainer/ray/launcher.py", """
        import ray

        @ray.remote
        class ReferenceModelActor:
            pass
        """)
    table = toml_module().loads(gen.generate([bnb, orl]))
    by = {p["phase"]: p for p in table["phase"]}
    # a generic root ("to") is a frame only in its own file; a stage's other functions are none
    assert by["weights-load"]["frames"] == [
        "/bitsandbytes/nn/modules.py::_quantize", "/bitsandbytes/nn/modules.py::to",
    ]
    # the @ray.remote classes of the trainer's files, not its other classes
    assert by["training"]["processes"] == ["PolicyModelActor", "ReferenceModelActor"]
    assert by["training"]["paths"] == ["/openrlhf/trainer/ray/ppo_actor.py"]
    origin = next(o for o in by["training"]["origins"] if o["evidence"] == "PolicyModelActor")
    assert origin == {"kind": "process", "evidence": "PolicyModelActor", "package": "openrlhf",
                      "source": "openrlhf/trainer/ray/ppo_actor.py", "versions": ["9.0.0"]}


def _frame(path: str, func: str) -> str:
    return f'  File "/usr/lib/python3.11/site-packages/{path}", line 330, in {func}\n    x = y\n'


def test_a_frame_named_with_its_file_counts_only_in_that_file() -> None:
    # bitsandbytes 0.43.1 / 0.50.2 nn/modules.py Params4bit.to (generated); torch 2.3.0
    # nn/modules/module.py Module.to's inner convert (hand-written)
    for path, func in (("bitsandbytes/nn/modules.py", "to"), ("torch/nn/modules/module.py", "convert"),
                       ("torch/nn/modules/module.py", "to")):
        log = "Traceback (most recent call last):\n" + _frame(path, func) + OOM + "\n"
        assert diagnose(log).findings[0].phase == "weights-load", (path, func)
    # the same function names in other files tell nothing
    for path, func in (("mylib/tensors.py", "to"), ("torch/nn/modules/module.py", "forward"),
                       ("bitsandbytes/nn/modules.py", "forward")):
        log = "Traceback (most recent call last):\n" + _frame(path, func) + OOM + "\n"
        assert diagnose(log).findings[0].phase == "unknown", (path, func)


def test_comfyui_prompt_execution_is_inference() -> None:
    # ComfyUI 0.3.26 / 0.3.64 execution.py (generated path): a queued prompt's nodes run there,
    # on Windows too; a loader's frame below it (diffusers' from_pretrained) says weights-load
    frame = '  File "C:\\ComfyUI_windows_portable\\ComfyUI\\execution.py", line 327, in execute\n'
    assert diagnose("Traceback (most recent call last):\n" + frame + OOM + "\n").findings[0].phase == "inference"
    loader = frame + _frame("diffusers/pipelines/pipeline_utils.py", "from_pretrained")
    assert diagnose("Traceback (most recent call last):\n" + loader + OOM + "\n").findings[0].phase == "weights-load"


def test_an_rl_trainers_ray_actor_prefix_names_training_last() -> None:
    # OpenRLHF 0.5.7 trainer/ray/ppo_actor.py: @ray.remote class ActorModelRayActor (generated)
    err = "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"
    assert diagnose(f"(ActorModelRayActor pid=348952) {err}\n").findings[0].phase == "training"
    # its vLLM rollout actor is not the trainer; nor is a process of any other name
    assert diagnose(f"(LLMRayActor pid=347860) {err}\n").findings[0].phase == "unknown"
    assert diagnose(f"(ActorModelRayActorX pid=1) {err}\n").findings[0].phase == "unknown"
    # a progress line before it says more than the process's role
    loading = "(ActorModelRayActor pid=348952) Loading checkpoint shards:  50%|#####     | 1/2\n"
    assert diagnose(loading + f"(ActorModelRayActor pid=348952) {err}\n").findings[0].phase == "weights-load"


def test_a_call_handed_the_optimizer_state_is_training() -> None:
    # Optax's opt_state (optimizer.update(grads, opt_state, params)); Flax TrainState.opt_state
    xla = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3743729664 bytes."
    for call in ("updates, opt_state = optimizer.update(grads, opt_state, params)",
                 "= update(params, grads_acc, opt_state_wfn_e, opt_state_van)",
                 "state = step(params=params, opt_state=opt_state)"):
        log = f'Traceback (most recent call last):\n  File "main.py", line 720, in <module>\n    {call}\n{xla}\n'
        assert diagnose(log).findings[0].phase == "training", call
    # the word alone, not passed to a call, is no evidence
    log = f'Traceback (most recent call last):\n  File "main.py", line 720, in <module>\n    print_opt_state_size\n{xla}\n'
    assert diagnose(log).findings[0].phase == "unknown"


def test_generator_reads_quarks_calibration_in_its_own_file(tmp_path: Path) -> None:
    gen = _generator()
    rel = tmp_path / "amd-quark-9.0"
    _write(rel, "quark/torch/quantization/api.py", '''
        import logging
        logger = logging.getLogger(__name__)

        class ModelQuantizer:
            def quantize_model(self, model, dataloader):
                logger.info(f"Quantizing with the quantization configuration:\\n{self.config}")
                model = self._prepare_model(model)
                self._do_calibration(model, dataloader)
                return model

            def _prepare_model(self, model):
                return model

            def _do_calibration(self, model, dataloader):
                logger.info("Calibration start.")
                for data in tqdm(dataloader, desc="Calibrating activations"):
                    model(data)

            def freeze(self, model):
                logger.info("Freeze model start.")
        ''')
    _write(rel, "quark/torch/quantization/observer/observer.py", '''
        class PerTensorMinMaxObserver:
            def forward(self, x):
                return x
        ''')
    table = toml_module().loads(gen.generate([rel]))
    by = {p["phase"]: p for p in table["phase"]}
    assert set(by) == {"inference"}
    # its roots count in api.py only (quantize_model and _prepare_model are names other packages use)
    assert by["inference"]["frames"] == [
        "/quark/torch/quantization/api.py::_do_calibration", "/quark/torch/quantization/api.py::quantize_model",
    ]
    assert by["inference"]["paths"] == ["/quark/torch/quantization/observer/observer.py"]
    assert by["inference"]["progress"] == [
        "Calibrating activations", r"Calibration start\.", "Quantizing with the quantization configuration",
    ]
    origin = next(o for o in by["inference"]["origins"] if o["kind"] == "path")
    assert origin == {"kind": "path", "evidence": "/quark/torch/quantization/observer/observer.py",
                      "package": "amd_quark", "source": "quark/torch/quantization/observer/observer.py",
                      "versions": ["9.0"]}


HIP_OOM = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 7 has a total capacity "
    "of 287.98 GiB of which 203.49 GiB is free."
)


def test_a_quark_calibration_observer_frame_is_inference() -> None:
    # amd-quark 0.6.0 / 0.13 quark/torch/quantization/observer/observer.py (generated path): its
    # statistics observers run in the calibration's forward passes (fresh-022)
    observer = ('  File "/workspace/Quark/quark/torch/quantization/observer/observer.py", line 712, in forward\n'
                "    amax, _ = torch.max(torch.abs(block_x), dim=-1, keepdim=True)\n")
    log = "Traceback (most recent call last):\n" + observer + HIP_OOM + "\n"
    assert diagnose(log).findings[0].phase == "inference"
    # a training loop's own frame above it says training (asked before inference)
    trained = _frame("transformers/trainer.py", "training_step") + observer
    assert diagnose("Traceback (most recent call last):\n" + trained + HIP_OOM + "\n").findings[0].phase == "training"
    # Quark's learnable observers (QAT) and its other modules name no phase
    for path in ("quark/torch/quantization/observer/lsq_observer.py", "quark/torch/export/api.py"):
        log = "Traceback (most recent call last):\n" + _frame(path, "forward") + HIP_OOM + "\n"
        assert diagnose(log).findings[0].phase == "unknown", path
    # quantize_model is a frame of api.py only
    for path, phase in (("quark/torch/quantization/api.py", "inference"), ("mytool/api.py", "unknown")):
        log = "Traceback (most recent call last):\n" + _frame(path, "quantize_model") + HIP_OOM + "\n"
        assert diagnose(log).findings[0].phase == phase, path
