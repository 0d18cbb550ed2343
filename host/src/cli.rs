//! The `nereus` command line. Flag names follow tritonserver's where they overlap, so existing
//! launch scripts carry over (`--model-repository=PATH`, `--http-port`, `--strict-readiness=false`).
use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::frontend::grpc::compression::ResponseCompression;
use crate::repository::location::RepositoryLocation;
use crate::server::ServerOptions;

#[derive(Parser, Debug)]
#[command(
    name = "nereus",
    version,
    about = "Inference server speaking Triton's protocols, with sandboxed WebAssembly backends"
)]
// tritonserver parses its options with getopt_long, which takes any unambiguous prefix of a long
// option (`--log-warn=false` is `--log-warning=false`) and lets a later value of an option replace
// an earlier one (`--log-verbose=1 … --log-verbose=0`); Triton's own QA scripts rely on both.
#[command(args_conflicts_with_subcommands = true, infer_long_args = true, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `nereus --model-repository …` without a subcommand serves, as tritonserver does.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve a model repository over HTTP and gRPC.
    #[command(infer_long_args = true, args_override_self = true)]
    Serve(Box<ServeArgs>),
    /// Write, build and check sandboxed backends (WebAssembly components).
    #[command(subcommand)]
    Plugin(PluginCommand),
}

/// `nereus plugin …`: a backend's way from an empty folder to a model.
#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// Write a model folder whose backend is a new plugin in LANG (an `add_sub` to start from):
    /// config.pbtxt, the source, and a build.sh that installs the language's toolchain and builds.
    New {
        /// The model's (and its backend's) name; the folder written is DIR/NAME.
        name: String,
        /// The plugin's language.
        #[arg(long, value_enum)]
        lang: PluginLanguage,
        /// Where to write the folder.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Build a plugin folder written by `nereus plugin new` (runs its build.sh), leaving
    /// `<DIR>/<NAME>.wasm` where the server looks for the model's backend.
    Build {
        /// The plugin's folder.
        dir: PathBuf,
    },
    /// Check a component before deploying it: the nereus:backend version it targets, its exports,
    /// the capabilities it imports and what the sandbox grants; with --config, load it as that
    /// model (the server's own load, with its messages) and run one request of zeros.
    Check {
        /// The component (`.wasm`).
        file: PathBuf,
        /// A model configuration to load it with.
        #[arg(long, value_name = "CONFIG_PBTXT")]
        config: Option<PathBuf>,
    },
}

/// The languages `nereus plugin new` writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginLanguage {
    Rust,
    Python,
    #[value(alias = "javascript")]
    Js,
    C,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The server's name in its metadata (`GET /v2`, gRPC ServerMetadata), tritonserver's `--id`.
    /// Clients that insist on talking to "triton" (Triton's health example does) get it with
    /// `--id triton`.
    #[arg(long = "id", default_value = "nereus")]
    pub id: String,
    /// A model repository: a folder, or a bucket as tritonserver names one: `s3://bucket/path`,
    /// `s3://host:port/bucket/path` (an S3-compatible store; `s3://https://host:port/…` for TLS),
    /// `gs://bucket/path`, `as://account/container/path` (or `az://`), `file:///folder`. A remote
    /// one is copied under `--cache-directory` and served from the copy (see docs/deploy.md).
    /// Repeat for several.
    #[arg(long = "model-repository", alias = "model-store", value_name = "PATH|URI", value_parser = repository_location)]
    pub model_repository: Vec<RepositoryLocation>,
    /// How models are loaded and changed while the server runs, as tritonserver's: `none` loads
    /// every model at start-up and changes nothing after; `poll` also looks at the repositories
    /// every `--repository-poll-secs` and loads, reloads and unloads what changed; `explicit` loads
    /// the `--load-model` models and then what the repository API's load and unload ask.
    #[arg(long = "model-control-mode", default_value = "none", value_parser = ["none", "poll", "explicit"])]
    pub model_control_mode: String,
    /// A model to load at start-up in `explicit` mode (repeatable); `*` alone loads every model.
    #[arg(long = "load-model", value_name = "NAME")]
    pub load_model: Vec<String>,
    /// How often `poll` mode looks at the repositories, in seconds (0: never).
    #[arg(long = "repository-poll-secs", default_value_t = 15)]
    pub repository_poll_secs: u64,
    /// How many models load at once at start-up.
    #[arg(long = "model-load-thread-count", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub model_load_thread_count: u32,
    /// tritonserver's flag: with `true`, a start-up failure (a model repository that cannot be
    /// read, a model that fails to load) stops the server with an error. Nereus's default is
    /// `false`: failed models are UNAVAILABLE with their reason and the others serve; with an
    /// unreadable repository the server loads nothing and is neither live nor ready.
    #[arg(long = "exit-on-error", default_value_t = false, action = ArgAction::Set, value_parser = TritonBool)]
    pub exit_on_error: bool,
    /// How long shutdown waits for in-flight requests before it exits anyway, in seconds; also how
    /// long an unload request waits for the model's in-flight requests.
    #[arg(long = "exit-timeout-secs", default_value_t = 30)]
    pub exit_timeout_secs: u64,
    /// Where backend components live as `<dir>/<backend>/<backend>.wasm`.
    #[arg(long = "backend-directory", value_name = "DIR")]
    pub backend_directory: Option<PathBuf>,
    /// The ONNX Runtime shared library for `onnxruntime` models (default: $NEREUS_ONNXRUNTIME_LIB,
    /// else ~/.cache/nereus/onnxruntime/libonnxruntime.so as scripts/setup-onnxruntime.sh installs it).
    #[arg(long = "onnxruntime-library", value_name = "PATH")]
    pub onnxruntime_library: Option<PathBuf>,
    /// The configuration each model prefers: `<model>/configs/<NAME>.pbtxt` where there is one,
    /// else `<model>/config.pbtxt` (tritonserver's flag).
    #[arg(long = "model-config-name", value_name = "NAME", value_parser = config_name)]
    pub model_config_name: Option<String>,
    /// tritonserver's deprecated flag: with `true`, configurations are not auto-completed from the
    /// models (`--disable-auto-complete-config` says it now). Giving it logs tritonserver's warning.
    #[arg(long = "strict-model-config", action = ArgAction::Set, value_parser = TritonBool)]
    pub strict_model_config: Option<bool>,
    /// Do not auto-complete configurations from the models (instance groups are still filled in).
    #[arg(long = "disable-auto-complete-config")]
    pub disable_auto_complete_config: bool,
    /// Folder for precompiled components and the copies of remote model repositories (default:
    /// $XDG_CACHE_HOME/nereus or ~/.cache/nereus).
    #[arg(long = "cache-directory", value_name = "DIR")]
    pub cache_directory: Option<PathBuf>,
    /// Compile components afresh on every start.
    #[arg(long = "disable-component-cache")]
    pub disable_component_cache: bool,
    /// Address the HTTP/REST endpoint listens on.
    #[arg(long = "http-address", default_value = "0.0.0.0")]
    pub http_address: String,
    /// HTTP port; 0 picks a free one (the log says which).
    #[arg(long = "http-port", default_value_t = 8000)]
    pub http_port: u16,
    /// Serve the HTTP/REST endpoint.
    #[arg(long = "allow-http", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub allow_http: bool,
    /// A regular expression: the HTTP request headers whose names it matches (anywhere in the
    /// name, ignoring case unless it starts with `(?-i)`) reach the model as string parameters of
    /// the inference request, as tritonserver's. A header named like a parameter Triton reserves
    /// (`sequence_id`, `priority`, `timeout`, `headers`, `binary_data_output`, `triton_*`) fails the
    /// request.
    #[arg(long = "http-header-forward-pattern", value_name = "REGEX", value_parser = forward_pattern)]
    pub http_header_forward_pattern: Option<crate::api::headers::HeaderForward>,
    /// The same for gRPC: the call metadata whose keys it matches (on a stream, the stream's
    /// metadata, for each of its requests).
    #[arg(long = "grpc-header-forward-pattern", value_name = "REGEX", value_parser = forward_pattern)]
    pub grpc_header_forward_pattern: Option<crate::api::headers::HeaderForward>,
    /// Threads serving HTTP (tritonserver's flag), each with its own single-threaded runtime; a new
    /// connection goes to the first thread with fewer than 8 open (else the one with the fewest)
    /// and stays there; 0 means one per CPU (tritonserver's default is 8 threads).
    #[arg(long = "http-thread-count", default_value_t = 0)]
    pub http_thread_count: usize,
    /// Largest HTTP request body, in bytes, before and after decompression (tritonserver's
    /// default, 64 MiB).
    #[arg(long = "http-max-input-size", default_value_t = 64 << 20, allow_negative_numbers = true, value_parser = max_input_size)]
    pub http_max_input_size: usize,
    /// Restrict HTTP APIs to requests carrying a header, as tritonserver:
    /// `<api>[,<api>…]:<key>=<value>` (repeatable; APIs: health, metadata, inference, shared-memory,
    /// model-config, model-repository, statistics, trace, logging).
    #[arg(long = "http-restricted-api")]
    pub http_restricted_api: Vec<String>,
    /// Restrict gRPC protocols the same way; the header is `triton-grpc-protocol-<key>`.
    #[arg(long = "grpc-restricted-protocol")]
    pub grpc_restricted_protocol: Vec<String>,
    /// How long an HTTP connection may go without a request, in ms: a client that has not sent a
    /// request's headers (or an idle keep-alive connection) loses its connection within one to two
    /// of these periods; a request being served keeps it.
    #[arg(long = "http-header-timeout-ms", default_value_t = 30_000)]
    pub http_header_timeout_ms: u64,
    /// How long an HTTP client may take to send a request's body, in ms (then 408).
    #[arg(long = "http-body-timeout-ms", default_value_t = 60_000)]
    pub http_body_timeout_ms: u64,
    /// Let clients register system shared memory for inputs and outputs (off by default, as in
    /// recent tritonserver).
    #[arg(long = "allow-client-shm", default_value_t = false, action = ArgAction::Set, value_parser = TritonBool, num_args = 0..=1, default_missing_value = "true")]
    pub allow_client_shm: bool,
    /// Serve HTTP over TLS with this PEM certificate chain (with `--http-ssl-key`).
    #[arg(long = "http-ssl-cert")]
    pub http_ssl_cert: Option<PathBuf>,
    /// The PEM private key of `--http-ssl-cert`.
    #[arg(long = "http-ssl-key")]
    pub http_ssl_key: Option<PathBuf>,
    /// Require HTTP clients to present a certificate signed by this PEM CA (mutual TLS).
    #[arg(long = "http-ssl-client-ca")]
    pub http_ssl_client_ca: Option<PathBuf>,
    /// Serve gRPC over TLS (tritonserver's flag), with `--grpc-server-cert` and `--grpc-server-key`.
    #[arg(long = "grpc-use-ssl", default_value_t = false, action = ArgAction::Set, value_parser = TritonBool, num_args = 0..=1, default_missing_value = "true")]
    pub grpc_use_ssl: bool,
    /// Mutual TLS for gRPC: clients need a certificate signed by `--grpc-root-cert`.
    #[arg(long = "grpc-use-ssl-mutual", default_value_t = false, action = ArgAction::Set, value_parser = TritonBool, num_args = 0..=1, default_missing_value = "true")]
    pub grpc_use_ssl_mutual: bool,
    /// The PEM certificate chain gRPC serves over TLS (tritonserver's flag).
    #[arg(long = "grpc-server-cert")]
    pub grpc_server_cert: Option<PathBuf>,
    /// The PEM private key of `--grpc-server-cert`.
    #[arg(long = "grpc-server-key")]
    pub grpc_server_key: Option<PathBuf>,
    /// The CA of client certificates (mutual TLS).
    #[arg(long = "grpc-root-cert")]
    pub grpc_root_cert: Option<PathBuf>,
    /// Address the gRPC endpoint listens on.
    #[arg(long = "grpc-address", default_value = "0.0.0.0")]
    pub grpc_address: String,
    /// gRPC port; 0 picks a free one (the log says which).
    #[arg(long = "grpc-port", default_value_t = 8001)]
    pub grpc_port: u16,
    /// Threads serving gRPC, each with its own single-threaded runtime, taking each new connection
    /// as HTTP's do (a connection stays on one thread); 0 means half the CPUs, at least one.
    #[arg(long = "grpc-io-threads", default_value_t = 0)]
    pub grpc_io_threads: usize,
    /// Largest gRPC message, in bytes (default: tritonserver's 2 GiB - 1).
    #[arg(long = "grpc-max-message-size", default_value_t = i32::MAX as usize)]
    pub grpc_max_message_size: usize,
    /// Interval of HTTP/2 keepalive pings on idle gRPC connections, in ms (tritonserver's flag).
    #[arg(long = "grpc-keepalive-time")]
    pub grpc_keepalive_time: Option<u64>,
    /// How long to wait for a keepalive ping's answer, in ms.
    #[arg(long = "grpc-keepalive-timeout")]
    pub grpc_keepalive_timeout: Option<u64>,
    /// How long a `ModelStreamInfer` stream may wait to hand its client the next message, in ms,
    /// before the stream is given up: its requests still running are cancelled (a decoupled
    /// model's, an ensemble's with its `max_inflight_requests` share). A client that keeps its
    /// connection but stops reading would otherwise hold them for as long as it stays connected.
    /// Give it at least the time a client takes to read the largest response. 0: wait for as long
    /// as the client stays connected (tritonserver's behaviour).
    #[arg(long = "grpc-stream-stall-timeout-ms", default_value_t = 30_000)]
    pub grpc_stream_stall_timeout_ms: u64,
    /// Compress inference responses (tritonserver's flag: none, low, medium or high; the last
    /// three all compress, with gzip or deflate as the client accepts).
    #[arg(long = "grpc-infer-response-compression-level", default_value = "none", value_parser = ResponseCompression::parse)]
    pub grpc_infer_response_compression_level: ResponseCompression,
    /// Serve the gRPC endpoint.
    #[arg(long = "allow-grpc", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub allow_grpc: bool,
    /// Port of the Prometheus metrics endpoint (`GET /metrics`); 0 picks a free one (the log says
    /// which).
    #[arg(long = "metrics-port", default_value_t = 8002)]
    pub metrics_port: u16,
    /// Address the metrics endpoint listens on (default: `--http-address`).
    #[arg(long = "metrics-address")]
    pub metrics_address: Option<String>,
    /// Serve Prometheus metrics, with tritonserver's names.
    #[arg(long = "allow-metrics", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub allow_metrics: bool,
    /// Report the CPU utilisation and memory gauges (`nv_cpu_*`).
    #[arg(long = "allow-cpu-metrics", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub allow_cpu_metrics: bool,
    /// Report the GPU gauges (utilization, memory, power, energy) of the CUDA devices, through
    /// NVML.
    #[arg(long = "allow-gpu-metrics", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub allow_gpu_metrics: bool,
    /// How often the CPU, memory and GPU gauges are sampled at most, in ms.
    #[arg(long = "metrics-interval-ms", default_value_t = 2000)]
    pub metrics_interval_ms: u64,
    /// A metrics setting, as tritonserver's: `summary_latencies=true` adds the
    /// `nv_inference_*_summary_us` quantiles (a lock per request), `summary_quantiles=0.5:0.05,0.9:0.01`
    /// chooses them; `histogram_latencies=true` adds `nv_inference_first_response_histogram_ms`;
    /// `counter_latencies=false` leaves out the `*_duration_us` counters. Repeatable.
    #[arg(long = "metrics-config", value_name = "SETTING=VALUE")]
    pub metrics_config: Vec<String>,
    /// The response cache, as tritonserver's: `--cache-config local,size=<bytes>` keeps the final
    /// responses of the models whose configuration has `response_cache { enable: true }`, up to
    /// that many bytes, and answers the same request again from it. Only the `local` cache exists
    /// (tritonserver's `redis` does not). See "Response cache" in docs/operations.md.
    #[arg(long = "cache-config", value_name = "CACHE,SETTING=VALUE")]
    pub cache_config: Vec<String>,
    /// Deprecated, as in tritonserver: `--cache-config local,size=BYTES` (0: no cache).
    #[arg(long = "response-cache-byte-size", value_name = "BYTES")]
    pub response_cache_byte_size: Option<u64>,
    /// A tracing setting, as tritonserver's (repeatable): `[<mode>,]<setting>=<value>`. Global
    /// settings: `level=OFF|TIMESTAMPS|TENSORS` (default OFF), `rate=N` (trace one request in N,
    /// default 1000), `count=N` (how many to trace; -1, the default: no limit),
    /// `mode=triton|opentelemetry` (default triton). Triton mode: `triton,file=PATH` (the JSON trace
    /// file), `triton,log-frequency=N` (write every N traces to PATH.<n>). OpenTelemetry mode:
    /// `opentelemetry,url=URL` (the collector's OTLP/HTTP traces URL, default
    /// http://localhost:4318/v1/traces), `opentelemetry,resource=KEY=VALUE` (a resource attribute),
    /// `opentelemetry,bsp_max_queue_size=N` (2048), `opentelemetry,bsp_schedule_delay=MS` (5000),
    /// `opentelemetry,bsp_max_export_batch_size=N` (512). The trace extension changes level, rate,
    /// count and log frequency at run time, globally or per model. See "Tracing" in
    /// docs/operations.md.
    #[arg(long = "trace-config", value_name = "[MODE,]SETTING=VALUE")]
    pub trace_config: Vec<String>,
    /// Deprecated, as in tritonserver: `--trace-config triton,file=PATH`.
    #[arg(long = "trace-file", value_name = "PATH")]
    pub trace_file: Option<String>,
    /// Deprecated, as in tritonserver: `--trace-config level=LEVEL` (repeatable).
    #[arg(long = "trace-level", value_name = "LEVEL")]
    pub trace_level: Vec<String>,
    /// Deprecated, as in tritonserver: `--trace-config rate=N`.
    #[arg(long = "trace-rate", value_name = "N")]
    pub trace_rate: Option<String>,
    /// Deprecated, as in tritonserver: `--trace-config count=N`.
    #[arg(long = "trace-count", value_name = "N", allow_hyphen_values = true)]
    pub trace_count: Option<String>,
    /// Deprecated, as in tritonserver: `--trace-config triton,log-frequency=N`.
    #[arg(long = "trace-log-frequency", value_name = "N")]
    pub trace_log_frequency: Option<String>,
    /// Ready only when every model is ready (tritonserver's default).
    #[arg(long = "strict-readiness", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub strict_readiness: bool,
    /// Verbose logging level (0: info; 1 or more: debug and plugin verbose logs). `NEREUS_LOG`
    /// takes a full tracing filter instead.
    #[arg(long = "log-verbose", default_value_t = 0)]
    pub log_verbose: u32,
    /// Log information lines.
    #[arg(long = "log-info", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub log_info: bool,
    /// Log warnings.
    #[arg(long = "log-warning", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub log_warning: bool,
    /// Log errors.
    #[arg(long = "log-error", default_value_t = true, action = ArgAction::Set, value_parser = TritonBool)]
    pub log_error: bool,
    /// The log line format, as tritonserver's: `default` (`I1125 06:48:54.627601 <pid>
    /// <file>:<line>] "<message>"`) or `ISO8601` (`2026-11-25T06:48:54Z I <pid> <file>:<line>]
    /// "<message>"`); messages are JSON-escaped unless TRITON_SERVER_ESCAPE_LOG_MESSAGES=0.
    #[arg(long = "log-format", default_value = "default", value_parser = ["default", "ISO8601"])]
    pub log_format: String,
    /// Append log lines to this file; without it, information goes to standard output and
    /// warnings and errors to standard error, as tritonserver's.
    #[arg(long = "log-file", value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// How long an idle instance worker keeps polling for work before it rests (gives its thread
    /// back to the shared pool), in microseconds. Polling saves a thread wake-up per request under
    /// load; 0 rests at once (least idle CPU).
    #[arg(long = "instance-poll-us", default_value_t = 200)]
    pub instance_poll_us: u64,
    /// Wasm models without a batcher whose executions have all taken less CPU time than this (in
    /// microseconds, over a warm-up) run on the I/O thread that received the request, skipping
    /// the hand-off to an instance thread and back; a faulting execution ends that for the model,
    /// a costlier one doubles the warm-up. 0 turns it off. See "Inline execution" in
    /// docs/scheduling.md.
    #[arg(long = "inline-execution-us", default_value_t = 250)]
    pub inline_execution_us: u64,
    /// Dynamic batches wait out max_queue_delay_microseconds for more requests even while an I/O
    /// thread has nothing to do, as tritonserver's do. By default (false) a batch of a model that
    /// runs inline goes, as large as it has grown, when an I/O thread is about to sleep. See
    /// "Dynamic batching" in docs/scheduling.md.
    #[arg(long = "strict-queue-delay", default_value_t = false, action = ArgAction::Set, value_parser = TritonBool)]
    pub strict_queue_delay: bool,
    /// For this many microseconds after each inference request, one idle-priority thread spins
    /// to keep a CPU awake, so the next request is not delayed by waking a halted (virtual) CPU.
    /// It yields to any other work at once, rests while the CPUs have less than half a CPU to
    /// spare, and parks when requests stop. 0 turns it off. See "Busy polling" in
    /// docs/scheduling.md.
    #[arg(long = "busy-poll-us", default_value_t = 1000)]
    pub busy_poll_us: u64,
    /// The busy-poll thread rests while the machine has less spare CPU than this (in CPUs: idle
    /// time plus its own spinning, sampled every 100 ms); 0 makes it spin whatever the load.
    #[arg(long = "busy-poll-min-spare-cpus", default_value_t = crate::busy_poll::MIN_SPARE_CPUS, value_parser = non_negative_cpus)]
    pub busy_poll_min_spare_cpus: f64,
    /// The most linear memory a model may give each of its sandboxes (`sandbox.memory_limit_mb`),
    /// in MiB. Models asking for more are UNAVAILABLE.
    #[arg(long = "sandbox-max-memory-mb", default_value_t = crate::backend::wasm::MAX_MEMORY_BYTES >> 20,
          value_parser = clap::value_parser!(u64).range(1..=(crate::backend::wasm::MAX_MEMORY_BYTES >> 20)))]
    pub sandbox_max_memory_mb: u64,
    /// The longest execution deadline a model may set (`sandbox.execution_timeout_ms`), in ms.
    #[arg(long = "sandbox-max-execution-timeout-ms", default_value_t = 3_600_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub sandbox_max_execution_timeout_ms: u64,
    /// The longest deadline a model may give each of its plugin's lifecycle calls, initialisation
    /// included (`sandbox.load_timeout_ms`), in ms.
    #[arg(long = "sandbox-max-load-timeout-ms", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub sandbox_max_load_timeout_ms: u64,
    /// The most output bytes a model may allow one response (`sandbox.max_output_bytes`).
    #[arg(long = "sandbox-max-output-bytes", default_value_t = 1 << 30)]
    pub sandbox_max_output_bytes: u64,
    /// The most instances one sandboxed model may have (its `instance_group` count and
    /// `sandbox.max_instances`).
    #[arg(long = "sandbox-max-instances", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub sandbox_max_instances: u64,
    /// Sandboxes held at once by all models' instances (one per instance while it has one). An
    /// instance at rest gives its back when another needs one and builds a new one on its next
    /// request; a sequence-batched model's are kept. A model that finds too few, free or to be
    /// taken back, is UNAVAILABLE.
    #[arg(long = "sandbox-total-instances", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..=crate::backend::wasm::MAX_TOTAL_INSTANCES))]
    pub sandbox_total_instances: u64,
    /// Wasm linear memory of all sandboxes together, in MiB (default: half the machine's memory).
    /// A growth past it fails the plugin that asked, with the reason.
    #[arg(long = "sandbox-total-memory-mb", value_parser = clap::value_parser!(u64).range(1..))]
    pub sandbox_total_memory_mb: Option<u64>,
    /// The share of `--sandbox-total-memory-mb` one model's sandboxes may hold together, so that
    /// no model can starve the others (0 < share <= 1).
    #[arg(long = "sandbox-model-memory-share", default_value_t = 0.5, value_parser = share)]
    pub sandbox_model_memory_share: f64,
    /// Log lines one model's plugin may write a second (and at once); the rest are dropped and
    /// counted (`nereus_plugin_log_lines_dropped`).
    #[arg(long = "sandbox-log-lines-per-sec", default_value_t = 100)]
    pub sandbox_log_lines_per_sec: u32,
    /// An instance whose sandbox memory grew more than this many MiB past what it held once
    /// initialised is rebuilt when it goes idle, which gives the memory back to the operating
    /// system (a Wasm memory only grows). Not for sequence-batched models, whose plugin keeps
    /// state.
    #[arg(long = "sandbox-trim-above-mb", default_value_t = 64)]
    pub sandbox_trim_above_mb: u64,
    /// How long such an instance must have been idle before it is rebuilt (0: as soon as its
    /// worker finds no work). A load whose every request needs the memory keeps it while it lasts,
    /// instead of paying for a rebuild and the memory's page faults on each request.
    #[arg(long = "sandbox-trim-after-idle-ms", default_value_t = 1000)]
    pub sandbox_trim_after_idle_ms: u64,
    /// Test-only: expose `/nereus/test/…` hooks (execution gates and counters).
    #[arg(long = "test-hooks", hide = true)]
    pub test_hooks: bool,
}

impl ServeArgs {
    /// The metrics settings from the flags; `None` with `--allow-metrics=false`.
    pub fn metrics(&self) -> Result<Option<crate::metrics::MetricsOptions>, String> {
        if !self.allow_metrics {
            return Ok(None);
        }
        let mut options = crate::metrics::MetricsOptions {
            interval: std::time::Duration::from_millis(self.metrics_interval_ms),
            cpu: self.allow_cpu_metrics,
            gpu: self.allow_gpu_metrics,
            ..Default::default()
        };
        for setting in &self.metrics_config {
            options.apply(setting)?;
        }
        Ok(Some(options))
    }

    /// The operator's sandbox limits (`--sandbox-*`).
    pub fn sandbox_limits(&self) -> crate::backend::wasm::SandboxLimits {
        let defaults = crate::backend::wasm::SandboxLimits::default();
        crate::backend::wasm::SandboxLimits {
            max_memory_bytes: self.sandbox_max_memory_mb << 20,
            max_execution_timeout: std::time::Duration::from_millis(self.sandbox_max_execution_timeout_ms),
            max_load_timeout: std::time::Duration::from_millis(self.sandbox_max_load_timeout_ms),
            max_output_bytes: self.sandbox_max_output_bytes,
            max_instances: self.sandbox_max_instances,
            total_instances: self.sandbox_total_instances,
            total_memory_bytes: self.sandbox_total_memory_mb.map_or(defaults.total_memory_bytes, |mb| mb << 20),
            model_memory_share: self.sandbox_model_memory_share,
            log_lines_per_sec: self.sandbox_log_lines_per_sec,
            trim_above_bytes: self.sandbox_trim_above_mb << 20,
            trim_after_idle: std::time::Duration::from_millis(self.sandbox_trim_after_idle_ms),
        }
    }

    /// The tracing settings from the flags (and the OpenTelemetry SDK's `OTEL_*` environment
    /// variables), with the warnings tritonserver prints for deprecated flags.
    pub fn trace(&self) -> Result<(crate::trace::options::TraceOptions, Vec<String>), String> {
        let flags = crate::trace::options::TraceFlags {
            config: self.trace_config.clone(),
            file: self.trace_file.clone(),
            level: self.trace_level.clone(),
            rate: self.trace_rate.clone(),
            count: self.trace_count.clone(),
            log_frequency: self.trace_log_frequency.clone(),
        };
        crate::trace::options::parse(&flags, &|name| std::env::var(name).ok())
    }

    /// tritonserver's warnings about `--strict-model-config`: deprecated, and overridden by
    /// `--disable-auto-complete-config` where the two disagree.
    fn model_config_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(strict) = self.strict_model_config {
            warnings.push(
                "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' \
                 instead."
                    .to_string(),
            );
            if self.disable_auto_complete_config && !strict {
                warnings.push(
                    "Warning: Overriding deprecated '--strict-model-config' from False to True in favor of \
                     '--disable-auto-complete-config'!"
                        .to_string(),
                );
            }
        }
        warnings
    }

    /// The server's settings from the flags, with the warnings to log (deprecated trace flags).
    /// `io_threads`: how many threads the frontends serve requests on. An unusable value is an
    /// error naming its flag.
    pub fn server_options(&self, io_threads: usize) -> anyhow::Result<(ServerOptions, Vec<String>)> {
        let metrics = self.metrics().map_err(|e| anyhow::anyhow!("--metrics-config: {e}"))?;
        let (trace, mut warnings) = self.trace().map_err(|e| anyhow::anyhow!("{e}"))?;
        warnings.extend(self.model_config_warnings());
        let (response_cache, cache_warnings) =
            crate::response_cache::CacheSettings::from_flags(&self.cache_config, self.response_cache_byte_size)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        warnings.extend(cache_warnings);
        let options = ServerOptions {
            id: self.id.clone(),
            io_threads,
            model_repositories: self.repositories(),
            model_config_name: self.model_config_name.clone(),
            control_mode: self.control_mode(),
            load_models: self.load_model.clone(),
            model_load_threads: self.model_load_thread_count as usize,
            exit_timeout: std::time::Duration::from_secs(self.exit_timeout_secs),
            backend_directory: self.backend_directory.clone(),
            onnxruntime_library: self
                .onnxruntime_library
                .clone()
                .or_else(|| std::env::var_os("NEREUS_ONNXRUNTIME_LIB").map(Into::into))
                .or_else(crate::backend::onnx::default_library),
            autocomplete: !self.strict_model_config.unwrap_or(false) && !self.disable_auto_complete_config,
            cache_directory: self.cache_directory(),
            repository_cache: self.repository_cache(),
            strict_readiness: self.strict_readiness,
            exit_on_error: self.exit_on_error,
            test_hooks: self.test_hooks,
            allow_client_shm: self.allow_client_shm,
            instance_poll: std::time::Duration::from_micros(self.instance_poll_us),
            inline_under: std::time::Duration::from_micros(self.inline_execution_us),
            strict_queue_delay: self.strict_queue_delay,
            busy_poll: std::time::Duration::from_micros(self.busy_poll_us),
            busy_poll_min_spare_cpus: self.busy_poll_min_spare_cpus,
            metrics,
            response_cache,
            sandbox_limits: self.sandbox_limits(),
            trace,
        };
        Ok((options, warnings))
    }

    /// The model repositories, each once: tritonserver keeps them in a set, so naming a folder
    /// twice is naming it once (its models are not duplicates of themselves).
    pub fn repositories(&self) -> Vec<RepositoryLocation> {
        let mut out: Vec<RepositoryLocation> = Vec::new();
        for path in &self.model_repository {
            if !out.contains(path) {
                out.push(path.clone());
            }
        }
        out
    }

    /// `--model-control-mode` with its polling interval.
    pub fn control_mode(&self) -> crate::control::ControlMode {
        use crate::control::ControlMode;
        match self.model_control_mode.as_str() {
            "poll" => ControlMode::Poll { interval: std::time::Duration::from_secs(self.repository_poll_secs) },
            "explicit" => ControlMode::Explicit,
            _ => ControlMode::None,
        }
    }

    pub fn cache_directory(&self) -> Option<PathBuf> {
        if self.disable_component_cache {
            return None;
        }
        self.cache_base()
    }

    /// `--cache-directory`, or $XDG_CACHE_HOME/nereus, or ~/.cache/nereus.
    fn cache_base(&self) -> Option<PathBuf> {
        self.cache_directory.clone().or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .map(|c| c.join("nereus"))
        })
    }

    /// Where remote repositories are copied: the cache folder even with
    /// `--disable-component-cache` (a copy is needed to serve at all), else the temporary folder.
    pub fn repository_cache(&self) -> PathBuf {
        self.cache_base().unwrap_or_else(|| std::env::temp_dir().join("nereus"))
    }
}

/// A boolean option's value as tritonserver reads it: `true`, `on` or `1`, `false`, `off` or `0`,
/// in any case (`--log-info=1`, `--strict-readiness=OFF`). The help names `true` and `false`.
#[derive(Clone, Copy)]
struct TritonBool;

impl clap::builder::TypedValueParser for TritonBool {
    type Value = bool;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<bool, clap::Error> {
        let text = value.to_string_lossy();
        match text.to_ascii_lowercase().as_str() {
            "true" | "on" | "1" => Ok(true),
            "false" | "off" | "0" => Ok(false),
            _ => {
                let name = arg.map_or_else(String::new, |a| format!("--{} ", a.get_long().unwrap_or_default()));
                Err(clap::Error::raw(
                    clap::error::ErrorKind::InvalidValue,
                    format!("{name}invalid value for bool option: {text}\n"),
                )
                .with_cmd(cmd))
            }
        }
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(["true", "false"].into_iter().map(clap::builder::PossibleValue::new)))
    }
}

/// `--http-max-input-size`: a byte count above zero, refused in tritonserver's words otherwise
/// (its command-line parser reads an int64 and rejects zero and below).
fn max_input_size(s: &str) -> Result<usize, String> {
    let n: i64 = s.trim().parse().map_err(|_| format!("'{s}' is not an integer"))?;
    if n <= 0 {
        return Err("Error: --http-max-input-size must be greater than 0.".into());
    }
    usize::try_from(n).map_err(|_| format!("'{s}' is too large"))
}

/// A CPU count that is a finite number of zero or more.
fn non_negative_cpus(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of CPUs (0 or more)")),
    }
}

fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("'{s}' is not a share (a number above 0, at most 1)")),
    }
}

/// A `--model-repository`: a folder, or a remote address checked now (a malformed one is a
/// command-line error, not a repository that fails later).
fn repository_location(value: &str) -> Result<RepositoryLocation, String> {
    RepositoryLocation::parse(value).map_err(|e| e.to_string())
}

/// A `--model-config-name`: a file name in the model's `configs/` folder, without its `.pbtxt`.
fn config_name(value: &str) -> Result<String, String> {
    if value.is_empty() || value.contains(['/', '\\']) || value == "." || value == ".." {
        return Err(format!(
            "'{value}' is not a configuration name (a file name in a model's configs/ folder, without .pbtxt)"
        ));
    }
    Ok(value.to_string())
}

/// A `--*-header-forward-pattern` value, compiled.
fn forward_pattern(pattern: &str) -> Result<crate::api::headers::HeaderForward, String> {
    crate::api::headers::HeaderForward::new(pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        let cli = Cli::try_parse_from(["nereus", "serve", "--model-repository", "m"].iter().chain(args))?;
        match cli.command {
            Some(Command::Serve(args)) => Ok(*args),
            _ => unreachable!("a serve subcommand was given"),
        }
    }

    #[test]
    fn booleans_read_as_tritonserver_reads_them() {
        for (text, want) in [("true", true), ("On", true), ("1", true), ("FALSE", false), ("off", false), ("0", false)]
        {
            let args = serve(&[&format!("--log-info={text}")]).unwrap();
            assert_eq!(args.log_info, want, "{text}");
            let args = serve(&["--strict-readiness", text]).unwrap();
            assert_eq!(args.strict_readiness, want, "{text}");
        }
        let err = serve(&["--log-error=yes"]).unwrap_err().to_string();
        assert!(err.contains("invalid value for bool option: yes"), "{err}");
    }

    #[test]
    fn a_later_value_replaces_an_earlier_one_and_lists_add_up() {
        let args = serve(&["--log-verbose=1", "--log-verbose", "2", "--load-model", "a", "--load-model=b"]).unwrap();
        assert_eq!(args.log_verbose, 2);
        assert_eq!(args.load_model, ["a", "b"]);
        let args = serve(&["--model-repository", "other"]).unwrap();
        assert_eq!(args.repositories().len(), 2, "{:?}", args.repositories());
    }

    #[test]
    fn a_repository_named_twice_is_one_repository() {
        let args = serve(&["--model-repository", "other", "--model-repository=m", "--model-store", "other"]).unwrap();
        assert_eq!(args.repositories(), [PathBuf::from("m").into(), PathBuf::from("other").into()]);
    }

    #[test]
    fn remote_repositories_are_parsed_on_the_command_line() {
        let args = serve(&["--model-repository", "s3://localhost:9000/bucket/models/"]).unwrap();
        let remote = args.repositories().into_iter().find_map(|r| match r {
            RepositoryLocation::Remote(uri) => Some(uri),
            RepositoryLocation::Local(_) => None,
        });
        let uri = remote.expect("a remote repository");
        assert_eq!(uri.endpoint.as_deref(), Some("http://localhost:9000"));
        assert_eq!((uri.bucket.as_str(), uri.prefix.as_str()), ("bucket", "models"));
        let err = serve(&["--model-repository", "s3://"]).unwrap_err().to_string();
        assert!(err.contains("no bucket name found"), "{err}");
    }

    #[test]
    fn a_long_option_may_be_shortened_while_unambiguous() {
        let args = serve(&["--log-warn=false", "--strict-read=false"]).unwrap();
        assert!(!args.log_warning && !args.strict_readiness);
        // `--log-` could be any of the logging options.
        assert!(serve(&["--log-=1"]).is_err());
        // Without the subcommand too, as tritonserver is started.
        let cli = Cli::try_parse_from(["nereus", "--model-repository", "m", "--log-warn=0"]).unwrap();
        assert!(!cli.serve.log_warning);
    }
}
