//! Tracing, as tritonserver has it: requests sampled by rate and count (per model, changeable at
//! run time through the trace extension), each traced through the frontend, the model it names and
//! an ensemble's steps, with the timestamps the statistics take. Two modes, chosen at start-up
//! (`--trace-config mode=…`): `triton` writes tritonserver's JSON trace file; `opentelemetry`
//! exports OTLP spans over HTTP to a collector, joining the caller's trace when the request carries
//! a W3C `traceparent`.
//!
//! Cost: with tracing off (the default, level OFF everywhere) a request pays one relaxed atomic
//! load ([`Tracer::sample`]) and, below the frontend, a branch on an empty `Option` where a traced
//! request records something. A sampled request records into its own trace (one mutex, no other
//! contention); export and file writing happen on threads of their own.
pub mod context;
mod export;
mod file;
mod number;
pub mod options;
mod otel;
mod record;
pub mod settings;
pub mod update;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

pub use context::Carrier;
pub use record::{Execution, FrontendEvent, Trace, TraceNode};

use context::SpanContext;
use export::Exporter;
use file::FileSink;
use options::TraceOptions;
use record::Recorder;
use settings::{SettingUpdate, SettingsTable, TraceMode};

/// How long shutdown waits for the exporter's last batches and the trace file.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// A setting as the trace extension reports it: `trace_level`'s list, then the other fields in
/// tritonserver's order, then the mode's own settings (a key may repeat, e.g. `resource`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedSettings {
    pub level: Vec<&'static str>,
    pub entries: Vec<(String, String)>,
}

/// The server's tracing: settings, sampling, and where traces go.
pub struct Tracer {
    mode: TraceMode,
    /// The mode's own settings from the command line, as reported.
    reported: Vec<(String, String)>,
    table: RwLock<SettingsTable>,
    /// Whether any setting traces at all: the one thing an untraced request reads.
    active: AtomicBool,
    recorder: Arc<Recorder>,
    exporter: Option<Exporter>,
    file: Option<FileSink>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").field("mode", &self.mode).field("active", &self.is_active()).finish()
    }
}

impl Tracer {
    /// Starts tracing as `options` say: the trace file's writer (Triton mode, when a file is
    /// given) or the OTLP exporter (OpenTelemetry mode), even when tracing starts off, since the
    /// trace extension may turn it on.
    pub fn new(options: TraceOptions) -> Result<Tracer, String> {
        let TraceOptions { values, mode, reported, export } = options;
        let file = match mode {
            TraceMode::Triton if !values.file.is_empty() => {
                Some(FileSink::start(values.file.clone().into()).map_err(|e| format!("the trace file's writer: {e}"))?)
            }
            _ => None,
        };
        let exporter = match (mode, export) {
            (TraceMode::OpenTelemetry, Some(export)) => Some(Exporter::start(export)?),
            _ => None,
        };
        let recorder = Arc::new(Recorder::new(exporter.as_ref().map(Exporter::queue)));
        let table = SettingsTable::new(values, mode, file.clone());
        Ok(Tracer {
            mode,
            reported,
            active: AtomicBool::new(table.any_on()),
            table: RwLock::new(table),
            recorder,
            exporter,
            file,
        })
    }

    /// Whether any request may be traced now (some setting's level is not OFF).
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Decides whether a request for `model` is traced, and starts its trace if so. `carrier`
    /// gives the request's headers (metadata), where OpenTelemetry mode looks for the caller's
    /// `traceparent`: a request carrying one is traced whatever the rate (unless the caller did not
    /// sample its own span), and its spans join the caller's trace.
    #[inline]
    pub fn sample(&self, model: &str, carrier: &dyn Carrier) -> Option<Trace> {
        if !self.is_active() {
            return None;
        }
        self.sample_active(model, carrier)
    }

    fn sample_active(&self, model: &str, carrier: &dyn Carrier) -> Option<Trace> {
        let setting = self.table.read().setting_for(model);
        let caller = match self.mode {
            TraceMode::OpenTelemetry if !setting.values.level.is_off() => SpanContext::extract(carrier),
            _ => None,
        };
        if !setting.sample(caller.is_some()) || caller.as_ref().is_some_and(|c| !c.is_sampled()) {
            return None;
        }
        Some(Trace::begin(self.recorder.clone(), setting, caller))
    }

    /// `model`'s setting ("": the global one), as the trace extension reports it.
    pub fn settings(&self, model: &str) -> ReportedSettings {
        let setting = self.table.read().setting_for(model);
        let v = &setting.values;
        let mut entries = vec![
            ("trace_rate".to_string(), v.rate.to_string()),
            ("trace_count".to_string(), setting.count().to_string()),
        ];
        if self.mode == TraceMode::Triton {
            entries.push(("log_frequency".to_string(), v.log_frequency.to_string()));
            entries.push(("trace_file".to_string(), v.file.clone()));
        }
        entries.push(("trace_mode".to_string(), self.mode.name().to_string()));
        entries.extend(self.reported.iter().cloned());
        ReportedSettings { level: v.level.names(), entries }
    }

    /// Changes `model`'s setting ("": the global one) and reports it as it is afterwards.
    pub fn update(&self, model: &str, update: &SettingUpdate) -> Result<ReportedSettings, crate::error::InferError> {
        {
            let mut table = self.table.write();
            let result = table.update((!model.is_empty()).then_some(model), update);
            self.active.store(table.any_on(), Ordering::Relaxed);
            result?;
        }
        Ok(self.settings(model))
    }

    /// Stops tracing at shutdown: the trace file gets the traces collected so far and is closed;
    /// the exporter sends what is queued. Waits a few seconds at most.
    pub fn shutdown(&self) {
        self.active.store(false, Ordering::Relaxed);
        if let Some(file) = &self.file {
            // The settings hand over what they collected as they go.
            let defaults = options::TraceOptions::default().values;
            drop(std::mem::replace(&mut *self.table.write(), SettingsTable::new(defaults, self.mode, None)));
            file.close(FLUSH_WAIT);
        }
        if let Some(exporter) = &self.exporter {
            exporter.shutdown(FLUSH_WAIT);
        }
    }
}

impl Default for Tracer {
    /// Tracing off, for good: no file, no exporter.
    fn default() -> Self {
        let options = TraceOptions::default();
        let table = SettingsTable::new(options.values, options.mode, None);
        Tracer {
            mode: options.mode,
            reported: Vec::new(),
            active: AtomicBool::new(false),
            table: RwLock::new(table),
            recorder: Arc::new(Recorder::new(None)),
            exporter: None,
            file: None,
        }
    }
}
