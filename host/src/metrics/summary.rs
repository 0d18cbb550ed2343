//! The latency summaries of `--metrics-config summary_latencies=true` (tritonserver's
//! `nv_inference_*_summary_us`): per model version, the quantiles of the most recent observations
//! (a window of [`WINDOW`]) with the count and sum of all of them. Off by default: each
//! observation takes a lock.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};

/// How many recent observations the quantiles are computed over.
pub const WINDOW: usize = 1024;

/// What a summary measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryKind {
    Request,
    Queue,
    ComputeInput,
    ComputeInfer,
    ComputeOutput,
    /// The response cache's hits and misses (shown for the models that use the cache only).
    CacheHit,
    CacheMiss,
}

const KINDS: [(SummaryKind, &str, &str); 7] = [
    (
        SummaryKind::Request,
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        SummaryKind::Queue,
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        SummaryKind::ComputeInput,
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        SummaryKind::ComputeInfer,
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        SummaryKind::ComputeOutput,
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
    (
        SummaryKind::CacheHit,
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit counts/durations per model, in microseconds.",
    ),
    (
        SummaryKind::CacheMiss,
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss counts/durations per model, in microseconds.",
    ),
];

#[derive(Default)]
struct Series {
    recent: VecDeque<f64>,
    count: u64,
    sum: f64,
}

/// One model version's summaries.
#[derive(Default)]
pub struct ModelSummaries {
    series: [Mutex<Series>; 7],
    /// Whether the version uses the response cache (as last loaded): its cache summaries are shown
    /// and its request summary is not, as tritonserver's.
    cache: std::sync::atomic::AtomicBool,
}

impl ModelSummaries {
    /// Whether the summary of `kind` is shown for this version.
    fn shows(&self, kind: SummaryKind) -> bool {
        let cache = self.cache.load(std::sync::atomic::Ordering::Relaxed);
        match kind {
            SummaryKind::Request => !cache,
            SummaryKind::CacheHit | SummaryKind::CacheMiss => cache,
            _ => true,
        }
    }
}

impl ModelSummaries {
    pub fn observe(&self, kind: SummaryKind, d: Duration) {
        let us = d.as_nanos() as f64 / 1000.0;
        let index = KINDS.iter().position(|(k, _, _)| *k == kind).unwrap_or(0);
        let mut s = self.series[index].lock();
        if s.recent.len() == WINDOW {
            s.recent.pop_front();
        }
        s.recent.push_back(us);
        s.count += 1;
        s.sum += us;
    }
}

/// Every model version's summaries, by `(model, version)`: they carry on across reloads.
pub struct LatencySummaries {
    quantiles: Vec<f64>,
    models: Mutex<BTreeMap<(String, i64), Arc<ModelSummaries>>>,
}

impl LatencySummaries {
    pub fn new(quantiles: Vec<f64>) -> Self {
        LatencySummaries { quantiles, models: Mutex::new(BTreeMap::new()) }
    }

    /// The summaries of a version, which uses the response cache when `cache` says so.
    pub fn model(&self, name: &str, version: i64, cache: bool) -> Arc<ModelSummaries> {
        let summaries = self.models.lock().entry((name.to_string(), version)).or_default().clone();
        summaries.cache.store(cache, std::sync::atomic::Ordering::Relaxed);
        summaries
    }

    /// The summary families, for the text encoder.
    pub fn families(&self) -> Vec<MetricFamily> {
        let models = self.models.lock();
        KINDS
            .iter()
            .enumerate()
            .map(|(index, (kind, name, help))| {
                let metrics = models
                    .iter()
                    .filter(|(_, summaries)| summaries.shows(*kind))
                    .map(|((model, version), summaries)| {
                        let s = summaries.series[index].lock();
                        let mut sorted: Vec<f64> = s.recent.iter().copied().collect();
                        sorted.sort_by(f64::total_cmp);
                        let mut summary = Summary::default();
                        summary.set_sample_count(s.count);
                        summary.set_sample_sum(s.sum);
                        summary.set_quantile(
                            self.quantiles
                                .iter()
                                .map(|q| {
                                    let mut quantile = Quantile::default();
                                    quantile.set_quantile(*q);
                                    quantile.set_value(quantile_of(&sorted, *q));
                                    quantile
                                })
                                .collect(),
                        );
                        let mut metric = Metric::default();
                        metric.set_label(vec![label("model", model), label("version", &version.to_string())]);
                        metric.set_summary(summary);
                        metric
                    })
                    .collect();
                let mut family = MetricFamily::default();
                family.set_name(name.to_string());
                family.set_help(help.to_string());
                family.set_field_type(MetricType::SUMMARY);
                family.set_metric(metrics);
                family
            })
            .filter(|f| !f.get_metric().is_empty())
            .collect()
    }
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut pair = LabelPair::default();
    pair.set_name(name.to_string());
    pair.set_value(value.to_string());
    pair
}

/// The `q` quantile of `sorted` (nearest rank); NaN when there is nothing, as Prometheus clients
/// report an empty summary.
fn quantile_of(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile_of(&v, 0.5), 50.0);
        assert_eq!(quantile_of(&v, 0.99), 99.0);
        assert_eq!(quantile_of(&v, 1.0), 100.0);
        assert!(quantile_of(&[], 0.5).is_nan());
    }
}
