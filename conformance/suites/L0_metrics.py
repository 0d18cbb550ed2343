"""qa/L0_metrics/test.sh: the CPU metrics, the metric families --metrics-config turns on and off,
custom summary quantiles, and the pending-request gauge under each scheduler.

Substitutions:
- `libtorch_float32_float32_float32` (the CPU-metrics tests' model) is Triton's ONNX model of the
  same datatypes under that name (harness/models.py: standin). test.sh appends
  `instance_group [{ kind: KIND_GPU }]`; the recipe does so only where a GPU is present.
- Triton's C++ `identity` backend (unit_test_models, identity_delay, its `execute_delay_ms`
  parameter) is Nereus's bundled `identity` plugin (plugins/identity), which honours
  `execute_delay_ms` as Triton's does.
"""
import re
import shutil

from harness.gpu import has_gpu

CPU_TEST = "cpu_metrics_test.py"
CONFIG_TEST = "metrics_config_test.py"
QUEUE_TEST = "metrics_queue_size_test.py"
HISTOGRAM_TEST = "histogram_metrics_test.py"
PINNED_TEST = "pinned_memory_metrics_test.py"


def run(suite):
    env = suite.env
    suite.skip("metrics_api_test (gtest)", "a C++ unit test of tritonserver's metrics API library, not of the server")

    models = suite.path("models")
    suite.reset("models")
    model = env.models.standin("libtorch_float32_float32_float32", models)
    cfg = model / "config.pbtxt"
    text = re.sub(r"(?m)^.*label_filename:.*$", "", cfg.read_text())
    if has_gpu():
        text += "instance_group [{ kind: KIND_GPU }]\n"
    cfg.write_text(text)
    repo = f"--model-repository={models}"

    with suite.block("cpu metrics") as b:
        b.start([repo, "--metrics-interval-ms=1000", "--log-verbose=1"],
                log="cpu_metrics_test_server.log")
        b.pytest(CPU_TEST)

    pinned = "CUDA pinned memory: Nereus has no pinned host memory pool (nv_pinned_memory_pool_*)"
    suite.skip_tests(CONFIG_TEST, ["MetricsConfigTest.test_pinned_memory_metrics_exist"], pinned, "pinned memory")
    for label in ("pinned memory", "custom pinned memory pool size"):
        suite.skip_tests(PINNED_TEST, ["TestPinnedMemoryMetrics.test_pinned_memory_metrics_asynchronous_requests",
                                       "TestPinnedMemoryMetrics.test_pinned_memory_metrics_synchronous_requests"],
                         pinned, label)
    gpu = "needs NVIDIA GPUs and NVML (nv_gpu_*, nv_energy_consumption; not reported by Nereus yet)"
    suite.skip("test.sh: GPU memory with --enable-peer-access=FALSE (nvidia-smi)", gpu)
    suite.skip("test.sh: nv_gpu_utilization for 2 GPUs", gpu)
    suite.skip("test.sh: nv_gpu_utilization for 1 GPU", gpu)
    suite.skip("test.sh: nv_energy_consumption changes every --metrics-interval-ms", gpu)

    unit = suite.path("unit_test_models")
    for m in ("identity_cache_on", "identity_cache_off"):
        (unit / m / "1").mkdir(parents=True, exist_ok=True)
    base = [f"--model-repository={unit}", "--model-control-mode=explicit"]

    def config_block(label, args, tests, quick=False, extra_env=None):
        with suite.block(label, quick=quick) as b:
            b.start(base + args)
            for t in tests:
                b.unittest(CONFIG_TEST, f"MetricsConfigTest.{t}", env=extra_env)

    config_block("default metrics config", ["--load-model=identity_cache_off"],
                 ["test_inf_counters_exist", "test_inf_histograms_missing", "test_inf_summaries_missing",
                  "test_cache_counters_missing", "test_cache_summaries_missing"], quick=True)
    config_block("histogram_latencies=true", ["--load-model=identity_cache_off", "--metrics-config",
                                              "histogram_latencies=true"],
                 ["test_inf_counters_exist", "test_inf_histograms_exist", "test_inf_summaries_missing",
                  "test_cache_counters_missing", "test_cache_summaries_missing"])
    config_block("summary_latencies=true", ["--load-model=identity_cache_off", "--metrics-config",
                                            "summary_latencies=true"],
                 ["test_inf_counters_exist", "test_inf_summaries_exist", "test_cache_counters_missing",
                  "test_cache_summaries_missing"], quick=True)
    config_block("summary_latencies=true counter_latencies=false",
                 ["--load-model=identity_cache_off", "--metrics-config", "summary_latencies=true",
                  "--metrics-config", "counter_latencies=false"],
                 ["test_inf_counters_missing", "test_inf_summaries_exist", "test_cache_counters_missing",
                  "test_cache_summaries_missing"])
    config_block("response cache", ["--cache-config", "local,size=1048576", "--load-model=identity_cache_on",
                                    "--metrics-config", "summary_latencies=true", "--metrics-config",
                                    "counter_latencies=true"],
                 ["test_inf_counters_exist", "test_inf_summaries_exist_with_cache",
                  "test_cache_counters_exist", "test_cache_summaries_exist"])
    quantiles = "0.1:0.0.1,0.7:0.01,0.75:0.01"
    config_block("custom summary quantiles", ["--load-model=identity_cache_off", "--metrics-config",
                                              "summary_latencies=true", "--metrics-config",
                                              f"summary_quantiles={quantiles}"],
                 ["test_summaries_custom_quantiles"], extra_env={"SUMMARY_QUANTILES": quantiles})

    repos = suite.path("model_namespacing_repos")
    (repos / "addsub_repo" / "addsub_ensemble" / "1").mkdir(parents=True, exist_ok=True)
    (repos / "subadd_repo" / "subadd_ensemble" / "1").mkdir(parents=True, exist_ok=True)
    # The test looks for namespace labels naming tritonserver's install path
    # (/opt/tritonserver/qa/L0_metrics/...), where test.sh runs in Triton's container.
    with suite.block("model namespacing on") as b:
        b.start([f"--model-repository={repos}/addsub_repo", f"--model-repository={repos}/subadd_repo",
                 "--model-namespacing=true", "--allow-metrics=true"])
        b.unittest(CONFIG_TEST, "MetricsConfigTest.test_model_namespacing_label_with_namespace_on")
    with suite.block("model namespacing off") as b:
        b.start([f"--model-repository={repos}/addsub_repo", "--model-namespacing=false",
                 "--allow-metrics=true"])
        b.unittest(CONFIG_TEST, "MetricsConfigTest.test_model_namespacing_label_with_namespace_off")

    with suite.block("pending request count") as b:
        qm = suite.path("queue_size_models")
        suite.reset("queue_size_models")
        max_batch, delay_us = 4, 100000
        default = qm / "default"
        shutil.copytree(suite.path("identity_delay"), default)
        (default / "1").mkdir(exist_ok=True)
        _sub(default / "config.pbtxt", r"(?m)^max_batch_size.*", f"max_batch_size: {max_batch}")
        variants = {
            "dynamic": f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}",
            "max_queue_size": f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} "
                              "default_queue_policy { max_queue_size: 4 } }",
            "sequence_direct": f"sequence_batching {{ direct {{ max_queue_delay_microseconds: {delay_us}, "
                               "minimum_slot_utilization: 1.0 } }",
            "sequence_oldest": f"sequence_batching {{ oldest {{ max_queue_delay_microseconds: {delay_us}, "
                               f"max_candidate_sequences: {max_batch} }} }}",
        }
        for name, extra in variants.items():
            shutil.copytree(default, qm / name)
            with open(qm / name / "config.pbtxt", "a") as f:
                f.write(f"\n{extra}\n")
        shutil.copytree(suite.path("ensemble_delay"), qm / "ensemble")
        (qm / "ensemble" / "1").mkdir(exist_ok=True)
        shutil.copytree(default, qm / "default_composing")
        shutil.copytree(qm / "dynamic", qm / "dynamic_composing")
        b.start([f"--model-repository={qm}", "--log-verbose=1"])
        b.unittest(QUEUE_TEST, env={"MAX_BATCH_SIZE": str(max_batch),
                                    "MAX_QUEUE_DELAY_US": str(delay_us)})

    python = "Python backend (the test's models are Python models: async_execute, async_execute_decouple)"
    suite.skip_tests(HISTOGRAM_TEST, ["TestHistogramMetrics.test_ensemble_decoupled"], python,
                     "histogram of an ensemble with a decoupled step")
    suite.skip_tests(HISTOGRAM_TEST, ["TestHistogramMetrics.test_buckets_override"], python,
                     "model_metrics bucket override")
    suite.skip_tests(CONFIG_TEST, ["MetricsConfigTest.test_inf_histograms_missing"], python,
                     "model_metrics with histogram_latencies=false")


def _sub(path, pattern, repl):
    path.write_text(re.sub(pattern, repl, path.read_text()))
