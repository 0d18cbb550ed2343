//! Per model-version statistics in the shape of Triton's statistics extension. Request outcomes are
//! recorded by the response sender (the one place every request ends); queue and compute times by
//! the instance worker that executed the batch. The Prometheus metrics (`crate::metrics`) are
//! counted in the same places, through the version's metric handles.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::metrics::{FailureReason, ModelMetrics};
use crate::proto::inference as pb;
use parking_lot::Mutex;

/// A `{count, ns}` pair.
#[derive(Default)]
pub struct StatDuration {
    count: AtomicU64,
    ns: AtomicU64,
}

impl StatDuration {
    pub fn record(&self, d: Duration) {
        self.record_n(1, d);
    }

    fn record_n(&self, n: u64, d: Duration) {
        self.count.fetch_add(n, Ordering::Relaxed);
        self.ns.fetch_add(d.as_nanos() as u64 * n, Ordering::Relaxed);
    }

    fn proto(&self) -> pb::StatisticDuration {
        pb::StatisticDuration { count: self.count.load(Ordering::Relaxed), ns: self.ns.load(Ordering::Relaxed) }
    }
}

/// How long the phases of one execution took (Triton's compute_input / compute_infer /
/// compute_output). For a Wasm backend: preparing the batch for the sandbox, the call (including
/// the copy into the sandbox and the responses out of it), and completing what is left after it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecutionTimes {
    pub input: Duration,
    pub infer: Duration,
    pub output: Duration,
}

#[derive(Default)]
struct BatchStat {
    compute_input: StatDuration,
    compute_infer: StatDuration,
    compute_output: StatDuration,
}

/// Statistics of the k-th responses of a decoupled model's requests.
#[derive(Default)]
struct ResponseStat {
    compute_infer: StatDuration,
    compute_output: StatDuration,
    success: StatDuration,
    fail: StatDuration,
    empty_response: StatDuration,
    cancel: StatDuration,
}

/// What a decoupled model's response was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseKind {
    Success,
    Fail,
    /// An error of kind CANCELLED (tritonserver counts it apart from other failures).
    Cancel,
    /// The final flag without a response.
    Empty,
}

#[derive(Default)]
pub struct ModelStats {
    success: StatDuration,
    fail: StatDuration,
    queue: StatDuration,
    compute_input: StatDuration,
    compute_infer: StatDuration,
    compute_output: StatDuration,
    /// Requests answered from the response cache: the lookups' time.
    cache_hit: StatDuration,
    /// Lookups that missed: the lookup's and the insertion's time.
    cache_miss: StatDuration,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    last_inference_ms: AtomicU64,
    batches: Mutex<BTreeMap<u64, BatchStat>>,
    responses: Mutex<BTreeMap<u64, ResponseStat>>,
    /// Requests dropped before they executed because their client had gone (they count as
    /// failures too, as tritonserver counts a cancelled request).
    cancelled: AtomicU64,
    /// The version's Prometheus metrics (none with `--allow-metrics=false`).
    metrics: Option<ModelMetrics>,
}

impl ModelStats {
    /// Statistics that also count into `metrics`.
    pub fn new(metrics: Option<ModelMetrics>) -> Self {
        ModelStats { metrics, ..Default::default() }
    }

    /// A request finished, successfully or failed for a reason, `total` after it arrived.
    pub fn record_outcome(&self, outcome: Result<(), FailureReason>, total: Duration) {
        match outcome {
            Ok(()) => {
                self.success.record(total);
                if let Some(m) = &self.metrics {
                    m.succeeded(total);
                }
            }
            Err(reason) => {
                self.fail.record(total);
                if let Some(m) = &self.metrics {
                    m.failed(reason);
                }
            }
        }
    }

    /// A request that `arrived` then has had its first response go out (the first-response
    /// histogram).
    pub fn record_first_response(&self, arrived: std::time::Instant) {
        if let Some(m) = &self.metrics {
            m.first_response(arrived);
        }
    }

    /// The `index`-th response of a decoupled model's request, `took` after the previous one (or
    /// after the request arrived). The time is the backend's: it counts as compute_infer.
    pub fn record_response(&self, index: u64, kind: ResponseKind, took: Duration) {
        let mut responses = self.responses.lock();
        let r = responses.entry(index).or_default();
        match kind {
            ResponseKind::Success => {
                r.compute_infer.record(took);
                r.compute_output.record(Duration::ZERO);
                r.success.record(took);
            }
            ResponseKind::Fail => r.fail.record(took),
            ResponseKind::Cancel => r.cancel.record(took),
            ResponseKind::Empty => r.empty_response.record(took),
        }
    }

    /// A request dropped unexecuted because its client had gone.
    pub fn record_cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.dropped_client_gone();
        }
    }

    /// Requests dropped unexecuted because their client had gone.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// A request answered from the response cache, `queued` after it arrived, by a lookup that
    /// took `lookup` (tritonserver's `UpdateSuccessCacheHit`: no inference or execution counted;
    /// the success itself is counted as the response is given).
    pub fn record_cache_hit(&self, queued: Duration, lookup: Duration) {
        self.record_queue(queued);
        self.cache_hit.record(lookup);
        if let Some(m) = &self.metrics {
            m.cache_hit(lookup);
        }
    }

    /// A lookup that missed, and the insertion of the response that followed: `took` together.
    pub fn record_cache_miss(&self, took: Duration) {
        self.cache_miss.record(took);
        if let Some(m) = &self.metrics {
            m.cache_miss(took);
        }
    }

    pub fn record_queue(&self, waited: Duration) {
        self.queue.record(waited);
        if let Some(m) = &self.metrics {
            m.queued(waited);
        }
    }

    /// One execution of `requests` requests totalling `batch_size` inferences.
    /// Records an execution of `requests` requests carrying `batch_size` inferences, run as a batch
    /// of `executed` (which counts the padding a sequence batcher adds, as tritonserver's batch
    /// statistics count its null requests; `inference_count` does not).
    pub fn record_execution(&self, requests: u64, batch_size: u64, executed: u64, times: ExecutionTimes) {
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        self.inference_count.fetch_add(batch_size, Ordering::Relaxed);
        self.compute_input.record_n(requests, times.input);
        self.compute_infer.record_n(requests, times.infer);
        self.compute_output.record_n(requests, times.output);
        if let Some(m) = &self.metrics {
            m.executed(requests, batch_size, times.input, times.infer, times.output);
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        self.last_inference_ms.store(now, Ordering::Relaxed);
        let mut batches = self.batches.lock();
        let b = batches.entry(executed).or_default();
        b.compute_input.record(times.input);
        b.compute_infer.record(times.infer);
        b.compute_output.record(times.output);
    }

    /// A snapshot as the statistics extension reports it (one entry of `model_stats`).
    pub fn snapshot(&self, name: &str, version: i64) -> pb::ModelStatistics {
        let batch_stats = self
            .batches
            .lock()
            .iter()
            .map(|(size, b)| pb::InferBatchStatistics {
                batch_size: *size,
                compute_input: Some(b.compute_input.proto()),
                compute_infer: Some(b.compute_infer.proto()),
                compute_output: Some(b.compute_output.proto()),
            })
            .collect();
        pb::ModelStatistics {
            name: name.to_string(),
            version: version.to_string(),
            last_inference: self.last_inference_ms.load(Ordering::Relaxed),
            inference_count: self.inference_count.load(Ordering::Relaxed),
            execution_count: self.execution_count.load(Ordering::Relaxed),
            inference_stats: Some(pb::InferStatistics {
                success: Some(self.success.proto()),
                fail: Some(self.fail.proto()),
                queue: Some(self.queue.proto()),
                compute_input: Some(self.compute_input.proto()),
                compute_infer: Some(self.compute_infer.proto()),
                compute_output: Some(self.compute_output.proto()),
                cache_hit: Some(self.cache_hit.proto()),
                cache_miss: Some(self.cache_miss.proto()),
            }),
            batch_stats,
            memory_usage: Vec::new(),
            response_stats: self
                .responses
                .lock()
                .iter()
                .map(|(index, r)| {
                    (
                        index.to_string(),
                        pb::InferResponseStatistics {
                            compute_infer: Some(r.compute_infer.proto()),
                            compute_output: Some(r.compute_output.proto()),
                            success: Some(r.success.proto()),
                            fail: Some(r.fail.proto()),
                            empty_response: Some(r.empty_response.proto()),
                            cancel: Some(r.cancel.proto()),
                        },
                    )
                })
                .collect(),
        }
    }
}
