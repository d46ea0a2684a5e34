"""JAX/TF remedies: allocator environment variables and the batch from the tensor shape."""

from __future__ import annotations

from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids


def test_jax_env_remedies() -> None:
    f = only_error(diagnose("jax/other-039.log"))
    assert remedy(f, "xla.mem-fraction").env == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"}
    assert remedy(f, "xla.allocator-platform").env == {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}
    # a 4.44 GiB buffer of one step: allocating on demand gives JAX no more memory (withheld)
    assert f.cause is not None and f.cause.id == "activation-peak"
    assert "xla.preallocate-false" not in remedy_ids(f)


def test_small_jax_request_is_the_preallocated_pool() -> None:
    """6 MiB failing (other-038): the pool XLA_PYTHON_CLIENT_MEM_FRACTION pre-allocated is full."""
    f = only_error(diagnose("jax/other-038.log"))
    assert f.cause is not None and f.cause.id == "memory-cap"
    assert f.cause.summary.startswith("A 6.00 MiB allocation failed: JAX serves every buffer from the pool")
    assert remedy_ids(f)[:2] == ["xla.mem-fraction", "xla.preallocate-false"]
    assert remedy(f, "xla.preallocate-false").env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_tf_batch_from_shape_and_no_jax_env() -> None:
    f = only_error(diagnose("tensorflow/other-041.log"))
    assert remedy(f, "xla.reduce-batch").settings == {"batch_size": "8"}
    # one batch too large for the limit: growing on demand would not make it fit (withheld)
    assert f.cause is not None and f.cause.id == "activation-peak"
    assert "tf.memory-growth" not in remedy_ids(f)
    assert not any(i.startswith("xla.mem") or i.startswith("xla.pre") for i in remedy_ids(f))


def test_tf_request_is_the_tensor_shape_times_its_dtype() -> None:
    """16 × 1 × 892800 × 8 × 4 × 2 × 2 float32 elements = 7,313,817,600 bytes."""
    f = only_error(diagnose("tensorflow/other-041.log"))
    assert f.account is not None and f.account.get("request") == 16 * 892800 * 8 * 4 * 2 * 2 * 4


def test_a_2d_tensor_does_not_tell_the_batch() -> None:
    """[2304, 384] is a weight matrix as often as a batch: halve the batch without inventing its value."""
    from oomdoctor.advisor.registry import AdviceInput, calculator
    from oomdoctor.report import Context, Finding, Location

    f = Finding(rule="tf.oom-allocating-tensor", kind="xla.resource-exhausted", engine="tensorflow",
                severity="error", title="t", message="m", location=Location(line=1, end_line=1),
                figures={"tensor_shape": [2304, 384], "tensor_dtype": "float"})
    r = calculator("xla.reduce-batch")(AdviceInput(f, Context()))
    assert r is not None and r.settings == {"batch_size": "half of the current value"}
    assert "[2304, 384]" in r.why


def test_a_tensor_on_the_cpu_is_host_ram() -> None:
    from oomdoctor.advisor.account import account_for
    from oomdoctor.advisor.cause import name_cause
    from oomdoctor.report import Context, Finding, Location

    f = Finding(rule="tf.oom-allocating-tensor", kind="xla.resource-exhausted", engine="tensorflow",
                severity="error", title="t", message="m", location=Location(line=1, end_line=1),
                figures={"tensor_shape": [16, 19, 19, 1024], "tensor_dtype": "float",
                         "device": "/job:localhost/replica:0/task:0/device:CPU:0", "allocator": "cpu"})
    assert name_cause(f, Context(), account_for(f, Context())).id == "host-ram"


_TF_OOM = (
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
    "shape[16,112,112,147] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
)


def test_keras_batch_is_model_fit_tf1_batch_is_prose() -> None:
    """The batch is `model.fit(batch_size=)` only where Keras' training loop is in the traceback; a TF1
    Session.run (other-041, fresh-018's shape) feeds arrays whose batch no one call sets: prose."""
    keras_log = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        '  File "/usr/local/lib/python3.8/dist-packages/keras/engine/training.py", line 1184, in fit\n'
        + _TF_OOM
    )
    session_log = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/tensorflow/python/client/session.py", line 1429, in _call_tf_sessionrun\n'
        + _TF_OOM
    )
    keras = only_error(diagnose_text(keras_log))
    session = only_error(diagnose_text(session_log))
    assert keras.product == "keras" and session.product == "tensorflow"
    assert remedy(keras, "xla.reduce-batch").settings == {"batch_size": "8"}
    assert [c.text for c in remedy(keras, "xla.reduce-batch").code] == ["model.fit(..., batch_size=8)"]
    assert remedy(session, "xla.reduce-batch").settings == {"batch_size": "8"}
    assert remedy(session, "xla.reduce-batch").code == []


def test_large_jax_buffer_gets_unified_memory_after_the_fraction() -> None:
    """other-039 (a 4.44 GiB buffer of a 14.44 GiB program): XLA's pool may grow past the GPU into
    unified memory, ColabFold's own 1 / 4.0; the cheaper 0.95 share comes first. A small request
    (other-038, the pool full) is not one large buffer: no unified memory."""
    f = only_error(diagnose("jax/other-039.log"))
    assert remedy_ids(f)[:2] == ["xla.mem-fraction", "xla.unified-memory"]
    assert remedy(f, "xla.unified-memory").env == {"TF_FORCE_UNIFIED_MEMORY": "1", "XLA_PYTHON_CLIENT_MEM_FRACTION": "4.0"}
    assert "xla.unified-memory" not in remedy_ids(only_error(diagnose("jax/other-038.log")))
