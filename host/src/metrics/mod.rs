//! Prometheus metrics, with tritonserver's names, labels and meanings (`nv_inference_*`,
//! `nv_model_load_duration_secs`, `nv_cpu_*`, `nv_gpu_*`), and Nereus's own (`nereus_*`: sandbox faults,
//! instance rebuilds, the component cache, requests whose client left), in the text format
//! tritonserver serves on `--metrics-port`.
//!
//! A request's outcome and an execution's times are counted where the statistics extension counts
//! them (`stats::ModelStats`), through a model version's [`ModelMetrics`]: a few atomic additions
//! on handles resolved once at load. The handles belong to the `(model, version)` label set, not
//! to the loaded version, so counters carry on across reloads as a Prometheus counter must (and
//! as tritonserver's do). Gauges that describe the present (pending requests, CPU, memory) are read
//! when the endpoint is scraped.
pub mod gpu;
pub mod summary;
pub mod system;

use std::sync::Arc;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    Counter, CounterVec, Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::error::ErrorKind;
use summary::{LatencySummaries, SummaryKind};
use system::SystemGauges;

/// Why a request failed, as tritonserver's `nv_inference_request_failure{reason}` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// Refused before it executed: a full queue, a queue timeout.
    Rejected = 0,
    /// Its client cancelled it or went away.
    Canceled = 1,
    /// The backend failed it.
    Backend = 2,
    /// Anything else.
    Other = 3,
}

impl FailureReason {
    pub const ALL: [FailureReason; 4] =
        [FailureReason::Rejected, FailureReason::Canceled, FailureReason::Backend, FailureReason::Other];

    /// The reason a request that ended with an error of `kind` failed for.
    pub fn of(kind: ErrorKind) -> FailureReason {
        match kind {
            ErrorKind::Unknown => FailureReason::Rejected,
            ErrorKind::Cancelled => FailureReason::Canceled,
            ErrorKind::Internal
            | ErrorKind::InvalidArg
            | ErrorKind::Unavailable
            | ErrorKind::Unsupported
            | ErrorKind::NotFound => FailureReason::Backend,
            _ => FailureReason::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            FailureReason::Rejected => "REJECTED",
            FailureReason::Canceled => "CANCELED",
            FailureReason::Backend => "BACKEND",
            FailureReason::Other => "OTHER",
        }
    }
}

/// How a sandbox's call failed, as `nereus_sandbox_faults{kind}` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The execution deadline (`sandbox.execution_timeout_ms`).
    Deadline,
    /// The fuel budget (`sandbox.fuel`).
    Fuel,
    /// The memory limit (`sandbox.memory_limit_mb`).
    Memory,
    /// Any other trap (a panic, an out-of-bounds access, a stack overflow, …).
    Trap,
    /// Anything else: an invalid response, a host failure.
    Other,
}

impl FaultKind {
    const ALL: [FaultKind; 5] =
        [FaultKind::Deadline, FaultKind::Fuel, FaultKind::Memory, FaultKind::Trap, FaultKind::Other];

    fn label(self) -> &'static str {
        match self {
            FaultKind::Deadline => "deadline",
            FaultKind::Fuel => "fuel",
            FaultKind::Memory => "memory",
            FaultKind::Trap => "trap",
            FaultKind::Other => "other",
        }
    }
}

/// Where a component came from when a model loaded it, as `nereus_component_loads{source}`
/// counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComponentSource {
    /// Already compiled in this process (same content hash).
    Memory = 0,
    /// Precompiled in the on-disk cache.
    Disk = 1,
    /// Compiled now.
    Compiled = 2,
}

impl ComponentSource {
    fn label(self) -> &'static str {
        match self {
            ComponentSource::Memory => "memory",
            ComponentSource::Disk => "disk",
            ComponentSource::Compiled => "compiled",
        }
    }
}

/// What `--metrics-config` and the other metrics flags set.
#[derive(Clone, Debug)]
pub struct MetricsOptions {
    /// `counter_latencies=false` leaves out the cumulative duration counters
    /// (`nv_inference_{request,queue,compute_*}_duration_us`), on by default.
    pub counter_latencies: bool,
    /// `histogram_latencies=true`: `nv_inference_first_response_histogram_ms`, the time from a
    /// request's arrival to its first response, in tritonserver's buckets.
    pub histogram_latencies: bool,
    /// `summary_latencies=true`: the `*_summary_us` quantiles, which cost a lock per request.
    pub summary_latencies: bool,
    /// `summary_quantiles=0.5:0.05,0.9:0.01,…` (quantile:error); the error is accepted and not used.
    pub summary_quantiles: Vec<f64>,
    /// `--metrics-interval-ms`: how often the CPU and memory gauges are sampled at most.
    pub interval: Duration,
    /// `--allow-cpu-metrics`.
    pub cpu: bool,
    /// `--allow-gpu-metrics` (reported when the server has CUDA devices and NVML loads).
    pub gpu: bool,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            counter_latencies: true,
            histogram_latencies: false,
            summary_latencies: false,
            summary_quantiles: vec![0.5, 0.9, 0.95, 0.99],
            interval: Duration::from_millis(2000),
            cpu: true,
            gpu: true,
        }
    }
}

impl MetricsOptions {
    /// Applies one `--metrics-config key=value`, as tritonserver reads it.
    pub fn apply(&mut self, setting: &str) -> Result<(), String> {
        let (key, value) = setting.split_once('=').ok_or_else(|| format!("'{setting}': expected <setting>=<value>"))?;
        let flag = || match value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(format!("{key}: expected true or false, got '{value}'")),
        };
        match key {
            "counter_latencies" => self.counter_latencies = flag()?,
            "histogram_latencies" => self.histogram_latencies = flag()?,
            "summary_latencies" => self.summary_latencies = flag()?,
            "summary_quantiles" => {
                let mut quantiles = Vec::new();
                for pair in value.split(',') {
                    let q = pair.split(':').next().unwrap_or_default();
                    match q.trim().parse::<f64>() {
                        Ok(q) if (0.0..=1.0).contains(&q) => quantiles.push(q),
                        _ => return Err(format!("summary_quantiles: '{pair}' is not <quantile>:<error>")),
                    }
                }
                self.summary_quantiles = quantiles;
            }
            _ => return Err(format!("unknown metrics setting '{key}'")),
        }
        Ok(())
    }
}

/// The server's metrics: every family, and the registry the endpoint renders.
pub struct Metrics {
    registry: Registry,
    success: IntCounterVec,
    failure: IntCounterVec,
    inferences: IntCounterVec,
    executions: IntCounterVec,
    request_us: CounterVec,
    queue_us: CounterVec,
    input_us: CounterVec,
    infer_us: CounterVec,
    output_us: CounterVec,
    pending: IntGaugeVec,
    load_secs: GaugeVec,
    faults: IntCounterVec,
    rebuilds: IntCounterVec,
    trims: IntCounterVec,
    rebuilt_on_demand: IntCounterVec,
    cancelled: IntCounterVec,
    component_loads: IntCounterVec,
    wasm_memory: IntGaugeVec,
    log_dropped: IntCounterVec,
    abandoned: IntCounter,
    /// The response cache's counters: `None` without `counter_latencies` (tritonserver counts them
    /// among the latency counters).
    cache: Option<CacheFamilies>,
    first_response: Option<HistogramVec>,
    summaries: Option<Arc<LatencySummaries>>,
    system: Option<SystemGauges>,
    gpu: Option<gpu::GpuGauges>,
}

/// The response cache's families, whose series exist only for the models that use the cache.
struct CacheFamilies {
    hits: IntCounterVec,
    hit_us: CounterVec,
    misses: IntCounterVec,
    miss_us: CounterVec,
}

/// A model version's response-cache counters.
#[derive(Clone)]
struct CacheCounters {
    hits: IntCounter,
    hit_us: Counter,
    misses: IntCounter,
    miss_us: Counter,
}

/// tritonserver's buckets for `nv_inference_first_response_histogram_ms`, in milliseconds.
const FIRST_RESPONSE_BUCKETS_MS: [f64; 4] = [100.0, 500.0, 2000.0, 5000.0];

/// The labels of a model version's metrics, as tritonserver's.
const MODEL_LABELS: &[&str] = &["model", "version"];

impl Metrics {
    pub fn new(options: &MetricsOptions) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        fn add<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> Result<C, prometheus::Error> {
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        }
        let counter = |name: &str, help: &str| add(&registry, IntCounterVec::new(Opts::new(name, help), MODEL_LABELS)?);
        // Without counter_latencies the duration counters still count, but are not rendered.
        let micros = |name: &str, help: &str| {
            let c = CounterVec::new(Opts::new(name, help), MODEL_LABELS)?;
            if options.counter_latencies { add(&registry, c) } else { Ok(c) }
        };
        Ok(Metrics {
            success: counter(
                "nv_inference_request_success",
                "Number of successful inference requests, all batch sizes",
            )?,
            failure: add(
                &registry,
                IntCounterVec::new(
                    Opts::new("nv_inference_request_failure", "Number of failed inference requests, all batch sizes"),
                    &["model", "version", "reason"],
                )?,
            )?,
            inferences: counter(
                "nv_inference_count",
                "Number of inferences performed (does not include cached requests)",
            )?,
            executions: counter(
                "nv_inference_exec_count",
                "Number of model executions performed (does not include cached requests)",
            )?,
            request_us: micros(
                "nv_inference_request_duration_us",
                "Cumulative inference request duration in microseconds (includes cached requests)",
            )?,
            queue_us: micros(
                "nv_inference_queue_duration_us",
                "Cumulative inference queuing duration in microseconds (includes cached requests)",
            )?,
            input_us: micros(
                "nv_inference_compute_input_duration_us",
                "Cumulative compute input duration in microseconds (does not include cached requests)",
            )?,
            infer_us: micros(
                "nv_inference_compute_infer_duration_us",
                "Cumulative compute inference duration in microseconds (does not include cached requests)",
            )?,
            output_us: micros(
                "nv_inference_compute_output_duration_us",
                "Cumulative inference compute output duration in microseconds (does not include cached requests)",
            )?,
            pending: add(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "nv_inference_pending_request_count",
                        "Instantaneous number of pending requests awaiting execution per-model.",
                    ),
                    MODEL_LABELS,
                )?,
            )?,
            load_secs: add(
                &registry,
                GaugeVec::new(Opts::new("nv_model_load_duration_secs", "Model load time in seconds"), MODEL_LABELS)?,
            )?,
            faults: add(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "nereus_sandbox_faults",
                        "Sandboxed executions that hit a limit or trapped, by kind (deadline, fuel, memory, trap, other)",
                    ),
                    &["model", "version", "kind"],
                )?,
            )?,
            rebuilds: counter("nereus_instance_rebuilds", "Sandboxed instances rebuilt after a fault")?,
            trims: counter(
                "nereus_instance_trims",
                "Sandboxed instances rebuilt while idle to give back grown memory (--sandbox-trim-above-mb)",
            )?,
            rebuilt_on_demand: counter(
                "nereus_instance_sandbox_builds_on_demand",
                "Sandboxes built again for a request after the instance had given its own back to another (--sandbox-total-instances)",
            )?,
            cancelled: counter(
                "nereus_requests_dropped_client_gone",
                "Requests dropped before they executed because their client had gone",
            )?,
            component_loads: add(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "nereus_component_loads",
                        "Backend components loaded, by where the compiled code came from (memory, disk: the \
                         component cache; compiled: compiled now)",
                    ),
                    &["model", "version", "source"],
                )?,
            )?,
            wasm_memory: add(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "nereus_wasm_memory_bytes",
                        "Linear memory of the model's sandboxes (one per instance), in bytes",
                    ),
                    MODEL_LABELS,
                )?,
            )?,
            log_dropped: counter(
                "nereus_plugin_log_lines_dropped",
                "Log lines of the model's plugin dropped by the rate limit (--sandbox-log-lines-per-sec)",
            )?,
            abandoned: add(
                &registry,
                IntCounter::new(
                    "nereus_requests_abandoned",
                    "Requests whose client went away (HTTP connection closed, gRPC call cancelled) before the answer",
                )?,
            )?,
            cache: if options.counter_latencies {
                Some(CacheFamilies {
                    hits: counter("nv_cache_num_hits_per_model", "Number of cache hits per model")?,
                    hit_us: micros(
                        "nv_cache_hit_duration_per_model",
                        "Total cache hit duration per model, in microseconds",
                    )?,
                    misses: counter("nv_cache_num_misses_per_model", "Number of cache misses per model")?,
                    miss_us: micros(
                        "nv_cache_miss_duration_per_model",
                        "Total cache miss (insert+lookup) duration per model, in microseconds",
                    )?,
                })
            } else {
                None
            },
            first_response: options
                .histogram_latencies
                .then(|| {
                    let opts = HistogramOpts::new(
                        "nv_inference_first_response_histogram_ms",
                        "Duration from request to first response in milliseconds",
                    )
                    .buckets(FIRST_RESPONSE_BUCKETS_MS.to_vec());
                    add(&registry, HistogramVec::new(opts, MODEL_LABELS)?)
                })
                .transpose()?,
            summaries: options
                .summary_latencies
                .then(|| Arc::new(LatencySummaries::new(options.summary_quantiles.clone()))),
            system: options.cpu.then(|| SystemGauges::new(&registry, options.interval)).transpose()?,
            gpu: if options.gpu { gpu::GpuGauges::new(&registry, options.interval)? } else { None },
            registry,
        })
    }

    /// The handles of one model version's metrics, created with zeros (every failure reason too)
    /// so that a scrape shows the model before its first request, as tritonserver's does. `cache`:
    /// the version answers from the response cache, which adds its counters and summaries (and,
    /// as in tritonserver, takes away the request summary, which would leave out cached requests'
    /// insertion time).
    pub fn model(&self, name: &str, version: i64, cache: bool) -> ModelMetrics {
        let v = version.to_string();
        let labels = [name, v.as_str()];
        let with_kind = |vec: &IntCounterVec, kind: &str| vec.with_label_values(&[name, v.as_str(), kind]);
        ModelMetrics {
            success: self.success.with_label_values(&labels),
            failure: FailureReason::ALL.map(|r| with_kind(&self.failure, r.label())),
            inferences: self.inferences.with_label_values(&labels),
            executions: self.executions.with_label_values(&labels),
            request_us: self.request_us.with_label_values(&labels),
            queue_us: self.queue_us.with_label_values(&labels),
            input_us: self.input_us.with_label_values(&labels),
            infer_us: self.infer_us.with_label_values(&labels),
            output_us: self.output_us.with_label_values(&labels),
            faults: FaultKind::ALL.map(|k| with_kind(&self.faults, k.label())),
            rebuilds: self.rebuilds.with_label_values(&labels),
            trims: self.trims.with_label_values(&labels),
            rebuilt_on_demand: self.rebuilt_on_demand.with_label_values(&labels),
            cancelled: self.cancelled.with_label_values(&labels),
            component_loads: [ComponentSource::Memory, ComponentSource::Disk, ComponentSource::Compiled]
                .map(|s| with_kind(&self.component_loads, s.label())),
            wasm_memory: self.wasm_memory.with_label_values(&labels),
            log_dropped: self.log_dropped.with_label_values(&labels),
            cache: self.cache.as_ref().filter(|_| cache).map(|c| CacheCounters {
                hits: c.hits.with_label_values(&labels),
                hit_us: c.hit_us.with_label_values(&labels),
                misses: c.misses.with_label_values(&labels),
                miss_us: c.miss_us.with_label_values(&labels),
            }),
            first_response: self.first_response.as_ref().map(|h| h.with_label_values(&labels)),
            summaries: self.summaries.as_ref().map(|s| s.model(name, version, cache)),
        }
    }

    /// Records how long a model version took to load.
    pub fn loaded(&self, name: &str, version: i64, took: Duration) {
        self.load_secs.with_label_values(&[name, &version.to_string()]).set(took.as_secs_f64());
    }

    /// Counts a request whose client went away before its answer.
    pub fn abandoned(&self) {
        self.abandoned.inc();
    }

    /// The text a scrape gets: `pending` lists each loaded version's requests awaiting execution
    /// (the gauge is set from it, and versions no longer loaded are dropped from it).
    pub fn render(&self, pending: &[(String, i64, u64)]) -> String {
        self.pending.reset();
        for (name, version, count) in pending {
            self.pending.with_label_values(&[name, &version.to_string()]).set(*count as i64);
        }
        if let Some(system) = &self.system {
            system.sample();
        }
        if let Some(gpu) = &self.gpu {
            gpu.sample();
        }
        let mut families = self.registry.gather();
        if let Some(summaries) = &self.summaries {
            families.extend(summaries.families());
        }
        let mut out = Vec::new();
        // The text encoder writes into a Vec, which cannot fail.
        let _ = TextEncoder::new().encode(&families, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// One model version's metric handles (cheap to clone: each is an `Arc`).
#[derive(Clone)]
pub struct ModelMetrics {
    success: IntCounter,
    failure: [IntCounter; 4],
    inferences: IntCounter,
    executions: IntCounter,
    request_us: Counter,
    queue_us: Counter,
    input_us: Counter,
    infer_us: Counter,
    output_us: Counter,
    faults: [IntCounter; 5],
    rebuilds: IntCounter,
    trims: IntCounter,
    rebuilt_on_demand: IntCounter,
    cancelled: IntCounter,
    component_loads: [IntCounter; 3],
    wasm_memory: IntGauge,
    log_dropped: IntCounter,
    cache: Option<CacheCounters>,
    first_response: Option<Histogram>,
    summaries: Option<Arc<summary::ModelSummaries>>,
}

fn micros(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1000.0
}

impl ModelMetrics {
    /// A request succeeded, `total` after it arrived.
    pub fn succeeded(&self, total: Duration) {
        self.success.inc();
        self.request_us.inc_by(micros(total));
        if let Some(s) = &self.summaries {
            s.observe(SummaryKind::Request, total);
        }
    }

    /// A request that `arrived` then has had its first response (or its only one) go out; counted
    /// in whole milliseconds, as tritonserver's. The clock is read only when the histogram is on.
    pub fn first_response(&self, arrived: std::time::Instant) {
        if let Some(h) = &self.first_response {
            h.observe(arrived.elapsed().as_millis() as f64);
        }
    }

    /// A request failed.
    pub fn failed(&self, reason: FailureReason) {
        self.failure[reason as usize].inc();
    }

    /// A request waited `waited` for its execution.
    pub fn queued(&self, waited: Duration) {
        self.queue_us.inc_by(micros(waited));
        if let Some(s) = &self.summaries {
            s.observe(SummaryKind::Queue, waited);
        }
    }

    /// One execution of `requests` requests totalling `batch_size` inferences, its phases taking
    /// `input`, `infer` and `output`; each request is charged them, as the statistics extension
    /// charges them.
    pub fn executed(&self, requests: u64, batch_size: u64, input: Duration, infer: Duration, output: Duration) {
        self.executions.inc();
        self.inferences.inc_by(batch_size);
        let n = requests as f64;
        self.input_us.inc_by(micros(input) * n);
        self.infer_us.inc_by(micros(infer) * n);
        self.output_us.inc_by(micros(output) * n);
        if let Some(s) = &self.summaries {
            s.observe(SummaryKind::ComputeInput, input);
            s.observe(SummaryKind::ComputeInfer, infer);
            s.observe(SummaryKind::ComputeOutput, output);
        }
    }

    /// A request answered from the response cache by a lookup that took `lookup`.
    pub fn cache_hit(&self, lookup: Duration) {
        if let Some(c) = &self.cache {
            c.hits.inc();
            c.hit_us.inc_by(micros(lookup));
        }
        if let Some(s) = &self.summaries {
            s.observe(SummaryKind::CacheHit, lookup);
        }
    }

    /// A lookup that missed, with the insertion after it: `took` together.
    pub fn cache_miss(&self, took: Duration) {
        if let Some(c) = &self.cache {
            c.misses.inc();
            c.miss_us.inc_by(micros(took));
        }
        if let Some(s) = &self.summaries {
            s.observe(SummaryKind::CacheMiss, took);
        }
    }

    /// A request dropped unexecuted because its client had gone.
    pub fn dropped_client_gone(&self) {
        self.cancelled.inc();
    }

    /// A sandboxed execution faulted.
    pub fn fault(&self, kind: FaultKind) {
        self.faults[FaultKind::ALL.iter().position(|k| *k == kind).unwrap_or(4)].inc();
    }

    /// The version's backend component was loaded (once per version, at load).
    pub fn component_loaded(&self, source: ComponentSource) {
        self.component_loads[source as usize].inc();
    }

    /// The gauge of the version's sandboxes' linear memory, which they add to and take from as
    /// it grows and as they go.
    pub fn wasm_memory(&self) -> IntGauge {
        self.wasm_memory.clone()
    }

    /// The counter of the version's plugin log lines dropped by the rate limit.
    pub fn log_lines_dropped(&self) -> IntCounter {
        self.log_dropped.clone()
    }

    /// A sandboxed instance was rebuilt after a fault.
    pub fn rebuilt(&self) {
        self.rebuilds.inc();
    }

    /// A sandboxed instance was rebuilt while idle to give back grown memory.
    pub fn trimmed(&self) {
        self.trims.inc();
    }

    /// A sandboxed instance that had given its sandbox back built a new one for a request.
    pub fn rebuilt_on_demand(&self) {
        self.rebuilt_on_demand.inc();
    }
}
