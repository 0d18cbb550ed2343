//! Trace settings as tritonserver keeps them (its `TraceManager::TraceSetting`): a global setting,
//! started from the command line, and settings of their own for the models the trace extension
//! configured. A model's setting holds only the fields set for it; the others follow the global
//! setting, also when it changes later. Clearing a field (`null`) makes it follow again; clearing
//! a global field restores the command line's value. Every change makes a new setting object, so
//! traces already sampled keep the one they were sampled under, and its counters (`trace_count`,
//! the sampling position, the trace file's batching) start afresh.
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::file::FileSink;
use crate::error::InferError;

/// What a trace records (tritonserver's trace level): `OFF`, or timestamps and/or tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceLevel {
    pub timestamps: bool,
    pub tensors: bool,
}

impl TraceLevel {
    pub const OFF: TraceLevel = TraceLevel { timestamps: false, tensors: false };
    pub const TIMESTAMPS: TraceLevel = TraceLevel { timestamps: true, tensors: false };
    pub const TENSORS: TraceLevel = TraceLevel { timestamps: false, tensors: true };

    pub fn is_off(self) -> bool {
        self == Self::OFF
    }

    /// Both levels' records.
    pub fn with(self, other: TraceLevel) -> TraceLevel {
        TraceLevel { timestamps: self.timestamps || other.timestamps, tensors: self.tensors || other.tensors }
    }

    /// The level as the trace extension reports it: `["OFF"]`, or the levels on.
    pub fn names(self) -> Vec<&'static str> {
        if self.is_off() {
            return vec!["OFF"];
        }
        let mut names = Vec::new();
        if self.timestamps {
            names.push("TIMESTAMPS");
        }
        if self.tensors {
            names.push("TENSORS");
        }
        names
    }
}

/// Where traces go: tritonserver's own JSON trace file, or OpenTelemetry spans exported over OTLP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TraceMode {
    #[default]
    Triton,
    OpenTelemetry,
}

impl TraceMode {
    pub fn name(self) -> &'static str {
        match self {
            TraceMode::Triton => "triton",
            TraceMode::OpenTelemetry => "opentelemetry",
        }
    }
}

/// The values of a setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingValues {
    pub level: TraceLevel,
    /// One request in `rate` is traced (0: none, except those whose caller sent a trace context in
    /// OpenTelemetry mode).
    pub rate: u32,
    /// How many more requests to trace (-1: no limit); counts down as traces are taken.
    pub count: i32,
    /// Triton mode: write the collected traces to `<file>.<n>` every this many traces (0: to
    /// `<file>` at shutdown).
    pub log_frequency: u32,
    /// Triton mode's trace file (set on the command line only).
    pub file: String,
}

/// Which fields a setting has of its own (a model's others follow the global setting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Specified {
    level: bool,
    rate: bool,
    count: bool,
    log_frequency: bool,
    file: bool,
}

/// A field's change in an update.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Change<T> {
    #[default]
    Keep,
    /// Back to the global value (for the global setting: the command line's).
    Clear,
    Set(T),
}

/// An update of a setting, as the trace extension asks for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SettingUpdate {
    pub level: Change<TraceLevel>,
    pub rate: Change<u32>,
    pub count: Change<i32>,
    pub log_frequency: Change<u32>,
}

/// What a setting counts while traces are taken and written (but the requests looked at, which
/// every request adds to: an atomic of their own, [`Setting::looked`]).
#[derive(Debug, Default)]
struct Counters {
    /// Traces taken while `trace_count` counted down (tritonserver's `sampled_`).
    taken: u64,
    /// `trace_count` left.
    count: i32,
    /// Traces written (Triton mode).
    collected: u64,
    /// Traces in `stream`, not yet in a file.
    in_stream: u32,
    /// Traces collected for the trace file, comma-separated.
    stream: String,
}

/// One setting object: its values, which of them are its own, and its counters.
#[derive(Debug)]
pub struct Setting {
    pub values: SettingValues,
    specified: Specified,
    pub mode: TraceMode,
    /// Why the setting traces nothing by rate ("" when it does, as far as its values go).
    invalid_reason: &'static str,
    counters: Mutex<Counters>,
    /// Requests looked at while the setting samples (every `rate`-th is traced): counted without
    /// the lock, which only a traced request takes.
    looked: AtomicU64,
    /// `trace_count` has run out (mirrors `counters.count == 0`, read without the lock).
    exhausted: AtomicBool,
    /// Triton mode: where collected traces are written.
    sink: Option<FileSink>,
}

impl Setting {
    fn new(values: SettingValues, specified: Specified, mode: TraceMode, sink: Option<FileSink>) -> Setting {
        let invalid_reason = if values.level.is_off() {
            "tracing is disabled"
        } else if values.rate == 0 {
            "sample rate must be non-zero"
        } else if mode == TraceMode::Triton && values.file.is_empty() {
            "trace file name is not given"
        } else {
            ""
        };
        let counters = Counters { count: values.count, ..Default::default() };
        Setting {
            exhausted: AtomicBool::new(values.count == 0),
            values,
            specified,
            mode,
            invalid_reason,
            counters: Mutex::new(counters),
            looked: AtomicU64::new(0),
            sink,
        }
    }

    /// Whether the setting samples by rate: its values allow it and `count` lasts.
    fn valid(&self, count: i32) -> bool {
        self.invalid_reason.is_empty() && count != 0
    }

    /// `trace_count` as it stands (counted down as traces are taken).
    pub fn count(&self) -> i32 {
        self.counters.lock().count
    }

    /// Whether the next request is traced, as tritonserver samples: every `rate`-th request looked
    /// at while the setting is valid and `trace_count` lasts, and — with `force` (a caller's trace
    /// context, OpenTelemetry mode) — every request, whatever the rate and count say.
    pub fn sample(&self, force: bool) -> bool {
        let rate = u64::from(self.values.rate);
        if rate == 0 {
            return force;
        }
        if !force && (!self.invalid_reason.is_empty() || self.exhausted.load(Ordering::Acquire)) {
            return false;
        }
        // Most requests stop here, with one atomic addition: not their turn.
        let looked = self.looked.fetch_add(1, Ordering::Relaxed) + 1;
        if !looked.is_multiple_of(rate) {
            return force;
        }
        let mut c = self.counters.lock();
        let hit = match c.count {
            0 => false,
            n if n > 0 => {
                c.count -= 1;
                c.taken += 1;
                if c.count == 0 {
                    self.exhausted.store(true, Ordering::Release);
                }
                true
            }
            _ => true,
        };
        hit || force
    }

    /// Collects a finished trace's JSON records (Triton mode). Every `log_frequency` traces, and
    /// once `trace_count` has run out and every sampled trace is in, the collected traces go to
    /// the next indexed file `<file>.<n>`; the rest go to `<file>` when the setting is replaced or
    /// the server stops.
    pub fn collect(&self, records: String) {
        let Some(sink) = &self.sink else { return };
        let mut c = self.counters.lock();
        if c.in_stream != 0 {
            c.stream.push(',');
        }
        c.in_stream += 1;
        c.collected += 1;
        c.stream.push_str(&records);
        let frequency = self.values.log_frequency;
        if (c.count == 0 && c.collected == c.taken) || (frequency != 0 && c.in_stream >= frequency) {
            c.in_stream = 0;
            let text = std::mem::take(&mut c.stream);
            drop(c);
            sink.save(text, true);
        }
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        let c = self.counters.get_mut();
        if let Some(sink) = &self.sink
            && c.in_stream != 0
        {
            sink.save(std::mem::take(&mut c.stream), self.values.log_frequency != 0);
        }
    }
}

/// The global setting, the command line's values it falls back to, and the models' settings.
#[derive(Debug)]
pub struct SettingsTable {
    default: SettingValues,
    global: Arc<Setting>,
    models: HashMap<String, Arc<Setting>>,
    /// Models with a setting of their own in which some fields follow the global setting.
    following: BTreeSet<String>,
    mode: TraceMode,
    sink: Option<FileSink>,
}

impl SettingsTable {
    pub fn new(values: SettingValues, mode: TraceMode, sink: Option<FileSink>) -> Self {
        let global = Arc::new(Setting::new(values.clone(), Specified::default(), mode, sink.clone()));
        SettingsTable { default: values, global, models: HashMap::new(), following: BTreeSet::new(), mode, sink }
    }

    /// The setting a request for `model` is traced under ("": the global one).
    pub fn setting_for(&self, model: &str) -> Arc<Setting> {
        self.models.get(model).unwrap_or(&self.global).clone()
    }

    /// Whether any setting traces at all (its level is not `OFF`).
    pub fn any_on(&self) -> bool {
        !self.global.values.level.is_off() || self.models.values().any(|s| !s.values.level.is_off())
    }

    /// Applies `update` to `model`'s setting (`None`: the global one, after which the models'
    /// settings that follow it are made again).
    pub fn update(&mut self, model: Option<&str>, update: &SettingUpdate) -> Result<(), InferError> {
        self.update_one(model, update)?;
        if model.is_none() {
            for name in self.following.clone() {
                self.update_one(Some(&name), &SettingUpdate::default())?;
            }
        }
        Ok(())
    }

    /// tritonserver's `UpdateTraceSettingInternal`: each field is the update's value, or the
    /// current setting's own, or the fallback's (the global setting for a model, the command line
    /// for the global setting).
    fn update_one(&mut self, model: Option<&str>, update: &SettingUpdate) -> Result<(), InferError> {
        let current = match model {
            Some(m) => self.models.get(m).cloned(),
            None => Some(self.global.clone()),
        };
        let fallback = match model {
            Some(_) => SettingValues { count: self.global.count(), ..self.global.values.clone() },
            None => self.default.clone(),
        };
        let current_values = current.as_ref().map(|c| SettingValues { count: c.count(), ..c.values.clone() });
        let own = current.as_ref().map(|c| c.specified).unwrap_or_default();
        fn pick<T: Clone>(change: &Change<T>, own: bool, current: Option<T>, fallback: T) -> (T, bool) {
            match change {
                Change::Clear => (fallback, false),
                Change::Set(v) => (v.clone(), true),
                Change::Keep if own => (current.unwrap_or(fallback), true),
                Change::Keep => (fallback, false),
            }
        }
        let cv = current_values.as_ref();
        let (level, level_own) = pick(&update.level, own.level, cv.map(|v| v.level), fallback.level);
        let (rate, rate_own) = pick(&update.rate, own.rate, cv.map(|v| v.rate), fallback.rate);
        let (count, count_own) = pick(&update.count, own.count, cv.map(|v| v.count), fallback.count);
        let (log_frequency, frequency_own) =
            pick(&update.log_frequency, own.log_frequency, cv.map(|v| v.log_frequency), fallback.log_frequency);
        let file = if own.file { cv.map(|v| v.file.clone()).unwrap_or_default() } else { fallback.file.clone() };
        let specified = Specified {
            level: level_own,
            rate: rate_own,
            count: count_own,
            log_frequency: frequency_own,
            file: own.file,
        };
        if let Some(name) = model {
            let all = specified.level && specified.rate && specified.count && specified.log_frequency && specified.file;
            let none =
                !(specified.level || specified.rate || specified.count || specified.log_frequency || specified.file);
            if all {
                self.following.remove(name);
            } else if none {
                // Nothing of its own: the model follows the global setting altogether.
                self.models.remove(name);
                self.following.remove(name);
                return Ok(());
            } else {
                self.following.insert(name.to_string());
            }
        }
        let values = SettingValues { level, rate, count, log_frequency, file };
        let setting = Setting::new(values, specified, self.mode, self.sink.clone());
        // The one invalid setting allowed is one that turns tracing off.
        if !setting.values.level.is_off() && !setting.valid(setting.values.count) {
            return Err(InferError::invalid(format!(
                "Attempting to set invalid trace setting :{}",
                setting.invalid_reason
            )));
        }
        match model {
            None => self.global = Arc::new(setting),
            Some(name) => {
                self.models.insert(name.to_string(), Arc::new(setting));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(level: TraceLevel, rate: u32, count: i32) -> SettingValues {
        SettingValues { level, rate, count, log_frequency: 0, file: "trace.json".into() }
    }

    fn set_rate(rate: u32) -> SettingUpdate {
        SettingUpdate { rate: Change::Set(rate), ..Default::default() }
    }

    fn values(t: &SettingsTable, model: &str) -> SettingValues {
        let s = t.setting_for(model);
        SettingValues { count: s.count(), ..s.values.clone() }
    }

    #[test]
    fn a_model_without_its_own_setting_follows_the_global_one() {
        let mut t = SettingsTable::new(cli(TraceLevel::TIMESTAMPS, 1, -1), TraceMode::Triton, None);
        assert_eq!(values(&t, "simple"), values(&t, ""));
        t.update(None, &set_rate(7)).unwrap();
        assert_eq!(values(&t, "simple").rate, 7);
        assert!(Arc::ptr_eq(&t.setting_for("simple"), &t.setting_for("")));
    }

    #[test]
    fn a_models_own_fields_stay_while_the_others_follow_the_global_setting() {
        // tritonserver's qa/L0_trace/trace_endpoint_test.py, test_http_clear_settings.
        let mut t = SettingsTable::new(cli(TraceLevel::TIMESTAMPS, 1, -1), TraceMode::Triton, None);
        let own = SettingUpdate { rate: Change::Set(12), log_frequency: Change::Set(34), ..Default::default() };
        t.update(Some("simple"), &own).unwrap();
        let global = SettingUpdate {
            rate: Change::Set(56),
            count: Change::Set(78),
            level: Change::Set(TraceLevel::OFF),
            ..Default::default()
        };
        t.update(None, &global).unwrap();
        let m = values(&t, "simple");
        assert_eq!((m.level, m.rate, m.count, m.log_frequency), (TraceLevel::OFF, 12, 78, 34));
        // Clearing global fields restores the command line's values, which the model follows.
        t.update(None, &SettingUpdate { rate: Change::Clear, count: Change::Clear, ..Default::default() }).unwrap();
        let g = values(&t, "");
        assert_eq!((g.level, g.rate, g.count, g.log_frequency), (TraceLevel::OFF, 1, -1, 0));
        let m = values(&t, "simple");
        assert_eq!((m.level, m.rate, m.count, m.log_frequency), (TraceLevel::OFF, 12, -1, 34));
        // Clearing a model's field makes it follow the global one again.
        t.update(Some("simple"), &SettingUpdate { rate: Change::Clear, level: Change::Clear, ..Default::default() })
            .unwrap();
        let m = values(&t, "simple");
        assert_eq!((m.level, m.rate, m.count, m.log_frequency), (TraceLevel::OFF, 1, -1, 34));
        // Clearing its last own field removes the model's setting.
        t.update(Some("simple"), &SettingUpdate { log_frequency: Change::Clear, ..Default::default() }).unwrap();
        assert!(Arc::ptr_eq(&t.setting_for("simple"), &t.setting_for("")));
    }

    #[test]
    fn only_a_setting_that_turns_tracing_off_may_be_invalid() {
        let mut t = SettingsTable::new(cli(TraceLevel::TIMESTAMPS, 1, -1), TraceMode::Triton, None);
        let e = t.update(Some("simple"), &set_rate(0)).unwrap_err();
        assert_eq!(e.message, "Attempting to set invalid trace setting :sample rate must be non-zero");
        let count0 = SettingUpdate { count: Change::Set(0), ..Default::default() };
        assert_eq!(t.update(None, &count0).unwrap_err().message, "Attempting to set invalid trace setting :");
        let off = SettingUpdate { level: Change::Set(TraceLevel::OFF), rate: Change::Set(0), ..Default::default() };
        t.update(Some("simple"), &off).unwrap();
        assert!(t.any_on());
        // Triton mode needs a trace file.
        let mut t = SettingsTable::new(
            SettingValues { file: String::new(), ..cli(TraceLevel::OFF, 1, -1) },
            TraceMode::Triton,
            None,
        );
        assert!(!t.any_on());
        let on = SettingUpdate { level: Change::Set(TraceLevel::TIMESTAMPS), ..Default::default() };
        assert_eq!(
            t.update(None, &on).unwrap_err().message,
            "Attempting to set invalid trace setting :trace file name is not given"
        );
        let mut otel = SettingsTable::new(
            SettingValues { file: String::new(), ..cli(TraceLevel::OFF, 1, -1) },
            TraceMode::OpenTelemetry,
            None,
        );
        otel.update(None, &on).unwrap();
        assert!(otel.any_on());
    }

    #[test]
    fn every_rate_th_request_is_traced_while_the_count_lasts() {
        let s = Setting::new(cli(TraceLevel::TIMESTAMPS, 3, 2), Specified::default(), TraceMode::Triton, None);
        let taken: Vec<bool> = (0..12).map(|_| s.sample(false)).collect();
        assert_eq!(taken.iter().filter(|t| **t).count(), 2);
        assert_eq!(taken[..6], [false, false, true, false, false, true]);
        assert_eq!(s.count(), 0);
        // A caller's trace context is traced whatever the count says.
        assert!(s.sample(true));
        let unlimited = Setting::new(cli(TraceLevel::TIMESTAMPS, 2, -1), Specified::default(), TraceMode::Triton, None);
        assert_eq!((0..100).filter(|_| unlimited.sample(false)).count(), 50);
        assert_eq!(unlimited.count(), -1);
    }

    #[test]
    fn rate_zero_and_level_off_trace_only_callers_contexts() {
        let zero =
            Setting::new(cli(TraceLevel::TIMESTAMPS, 0, -1), Specified::default(), TraceMode::OpenTelemetry, None);
        assert!(!(0..10).any(|_| zero.sample(false)));
        assert!(zero.sample(true));
        let off = Setting::new(cli(TraceLevel::OFF, 1, -1), Specified::default(), TraceMode::OpenTelemetry, None);
        assert!(!(0..10).any(|_| off.sample(false)));
    }

    #[test]
    fn a_changed_setting_starts_its_counters_afresh() {
        let mut t = SettingsTable::new(cli(TraceLevel::TIMESTAMPS, 1, 3), TraceMode::Triton, None);
        assert!(t.setting_for("m").sample(false));
        assert_eq!(t.setting_for("m").count(), 2);
        // The model's new setting takes the global count as it stands…
        t.update(Some("m"), &set_rate(2)).unwrap();
        assert_eq!(t.setting_for("m").count(), 2);
        // …and a global change takes the command line's again.
        t.update(None, &set_rate(1)).unwrap();
        assert_eq!(t.setting_for("").count(), 3);
        assert_eq!(t.setting_for("m").count(), 3);
    }
}
