"""qa/L0_shared_memory/test.sh: system shared memory — registration refused unless
--allow-client-shm=true (status still answers), regions registered, unregistered and registered
again, inference with inputs and outputs in regions (also mixed with raw inputs), offsets and
sizes out of bounds or overflowing, reserved and invalid keys, and a region registered at a large
offset; each test over HTTP and gRPC, one server per test, as test.sh runs them.

The first part's `simple` model is Triton's example (Triton's QA image copies it into the suite's
models folder): Nereus's `simple` example (the `add_sub` Wasm backend, model_repository/) stands
in. test_large_shm_register_offset runs on Triton's generated `onnx_int32_int32_int32` (BACKENDS=onnx).
The TestSharedMemoryUnregister cases need `execute_delayed_model`, a Python-backend model: skipped.
"""
import shutil

TEST = "shared_memory_test.py"
ALLOWED = ["test_invalid_create_shm", "test_valid_create_set_register", "test_unregister_before_register",
           "test_unregister_after_register", "test_reregister_after_register",
           "test_unregister_after_inference", "test_register_after_inference", "test_too_big_shm",
           "test_mixed_raw_shm", "test_unregisterall", "test_infer_offset_out_of_bound",
           "test_infer_byte_size_out_of_bound", "test_infer_integer_overflow",
           "test_register_out_of_bound", "test_register_reserved_names",
           "test_register_invalid_shm_key", "test_python_client_leak"]
PROTOCOLS = ("http", "grpc")


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("models", "onnx_models")
    shutil.copytree(env.repo_root / "model_repository" / "simple", p("models", "simple"))
    models = f"--model-repository={p('models')}"

    for protocol in PROTOCOLS:
        with suite.block(f"client shm disabled by default, {protocol}", quick=protocol == "http") as b:
            b.start([models, "--log-verbose=1"])
            b.unittest(TEST, "SharedMemoryTest.test_client_shm_disabled_by_default",
                       env={"CLIENT_TYPE": protocol})

    for test in ALLOWED:
        for protocol in PROTOCOLS:
            quick = protocol == "grpc" and test in ("test_mixed_raw_shm", "test_infer_offset_out_of_bound")
            with suite.block(f"{test}, {protocol}", quick=quick) as b:
                b.start([models, "--log-verbose=1", "--allow-client-shm=true"])
                b.unittest(TEST, f"SharedMemoryTest.{test}", env={"CLIENT_TYPE": protocol})

    suite.skip_tests(TEST, [f"TestSharedMemoryUnregister.{t}_{protocol}" for t in (
        "test_unregister_shm_during_inference_single_req",
        "test_unregister_shm_during_inference_multiple_req",
        "test_unregister_shm_after_inference") for protocol in PROTOCOLS],
        "needs execute_delayed_model, a Python-backend model (Nereus has no Python backend)")

    # test.sh copies version 1 only (2 and 3 swap the outputs), the config and the labels.
    src = env.models.model("qa_model_repository", "onnx_int32_int32_int32")
    dest = p("onnx_models", src.name)
    shutil.copytree(src / "1", dest / "1")
    for f in ("config.pbtxt", "output0_labels.txt"):
        shutil.copy(src / f, dest / f)
    for protocol in PROTOCOLS:
        with suite.block(f"large register offset, {protocol}") as b:
            b.start([f"--model-repository={p('onnx_models')}", "--log-verbose=1", "--allow-client-shm=true"])
            b.unittest(TEST, "SharedMemoryTest.test_large_shm_register_offset",
                       env={"CLIENT_TYPE": protocol, "BACKENDS": "onnx"})
