"""qa/L0_model_queue/test.sh: the dynamic batcher's queue policy — `max_queue_size` (requests past
it refused at once with "Exceeds maximum queue size"), a queue timeout whose action is DELAY (the
request waits behind later ones) or REJECT (refused with "Request timeout expired", counted in
`nv_inference_request_failure{reason="REJECTED"}`, and as "OTHER" for the ensemble over it), a
client's timeout overriding the default (`allow_timeout_override`), priority levels (up to
`priority_levels` of 2^64-1 with a default level of 2^32) and per-priority queue policies — each
checked from the answers' timing and errors, over HTTP and gRPC, for the model and for an ensemble
of one step over it.

Seven server runs, as test.sh, one per test of model_queue_test.py, each with test.sh's
configuration: `qa/custom_models/custom_zero_1_float32` with `dims: [ -1 ]`, `max_batch_size: 32`
and one CPU instance, plus the run's `dynamic_batching { ... }` (and, for test_max_queue_size,
`execute_delay_ms: 5000`), beside the suite's `ensemble_zero_1_float32`.

Substitution: `custom_zero_1_float32` is a model of Triton's C++ `identity` test backend
(`backend: "identity"`); Nereus's bundled `identity` plugin is that backend here (same name, same
configuration, and it honours `execute_delay_ms`): what the tests check is the server's
scheduler, not the backend.
"""
import shutil

from harness.core import sed

TEST = "model_queue_test.py"
MODEL = "custom_zero_1_float32"
ENSEMBLE = "ensemble_zero_1_float32"

# test.sh's dynamic_batching (and parameters) appended to the model's configuration, per test.
BLOCKS = {
    "test_max_queue_size": """dynamic_batching { 
    preferred_batch_size: [ 4, 8 ]
    default_queue_policy {
        max_queue_size: 8
    }
}
parameters [
{ key: "execute_delay_ms"; value: { string_value: "5000" }}
]
""",
    "test_policy_delay": """dynamic_batching { 
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    default_queue_policy {
        timeout_action: DELAY
        default_timeout_microseconds: 100000
    }
}
""",
    "test_policy_reject": """dynamic_batching { 
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    default_queue_policy {
        default_timeout_microseconds: 100000
    }
}
""",
    "test_timeout_override": """dynamic_batching { 
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    default_queue_policy {
        allow_timeout_override: true
        default_timeout_microseconds: 1000000
    }
}
""",
    "test_priority_levels": """dynamic_batching { 
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    priority_levels: 2
    default_priority_level: 2
}
""",
    "test_max_priority_levels": """dynamic_batching { 
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    priority_levels: 18446744073709551615
    default_priority_level: 4294967296
}
""",
    "test_priority_with_policy": """dynamic_batching { 
    preferred_batch_size: [ 4, 8, 32 ]
    max_queue_delay_microseconds: 10000000
    priority_levels: 2
    default_priority_level: 2
    default_queue_policy {
        timeout_action: DELAY
        allow_timeout_override: true
        default_timeout_microseconds: 11000000
    }
    priority_queue_policy {
        key: 2
        value: {
            timeout_action: REJECT
            allow_timeout_override: true
            default_timeout_microseconds: 11000000
        }
    }
}
""",
}


def run(suite):
    p = suite.path
    # cp -r ../custom_models/custom_zero_1_float32 .; mkdir its 1/ and the ensemble's 1/
    base = p(MODEL)
    if base.exists():
        shutil.rmtree(base)
    shutil.copytree(suite.qa_dir.parent / "custom_models" / MODEL, base)
    (base / "1").mkdir(parents=True, exist_ok=True)
    p(ENSEMBLE, "1").mkdir(parents=True, exist_ok=True)
    config = base / "config.pbtxt"
    sed(config, [(r"dims:.*\[.*\]", "dims: [ -1 ]"), (r"max_batch_size:.*", "max_batch_size: 32")])
    config.write_text(config.read_text().rstrip("\n") + "\ninstance_group [ { kind: KIND_CPU count: 1 }]\n")

    for test, extra in BLOCKS.items():
        # rm -fr models && mkdir models && cp -r the ensemble and the model, and append the test's part
        suite.reset("models")
        models = p("models")
        shutil.copytree(p(ENSEMBLE), models / ENSEMBLE)
        shutil.copytree(base, models / MODEL)
        cfg = models / MODEL / "config.pbtxt"
        cfg.write_text(cfg.read_text() + extra)
        with suite.block(test) as b:
            b.start([f"--model-repository={models}"])
            b.unittest(TEST, f"ModelQueueTest.{test}")
