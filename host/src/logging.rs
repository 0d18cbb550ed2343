//! Logging: the tracing subscriber, writing tritonserver's log lines, and Triton's logging
//! extension (log settings readable and changeable at run time over HTTP `/v2/logging` and gRPC
//! `LogSettings`).
//!
//! A line is tritonserver's: `I1125 06:48:54.627601 12454 server.rs:97] "message"` (`default`), or
//! `2026-11-25T06:48:54Z I 12454 server.rs:97] "message"` (`ISO8601`): the level (E, W, I; verbose
//! lines are I), the time in UTC, the process id, the source file and line, and the message as a
//! JSON string — escaped, so that no message (a plugin's included) can start a line of its own or
//! hide one; `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0` writes messages as they are, as tritonserver
//! does. The start-up tables are the exception, as in tritonserver: laid out over several lines,
//! their cells escaped instead (`startup_summary`). Lines go to `--log-file` when given, else as tritonserver's: information to standard
//! output, warnings and errors to standard error. They carry no colour: files, pipes and log
//! collectors read them as text.
use std::fmt::Write as _;
use std::fs::File;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

use crate::error::InferError;

/// Triton's log settings. `log_file` names the file lines go to ("" for the console); it is set
/// by `--log-file` only, as tritonserver allows.
#[derive(Clone, Debug, PartialEq)]
pub struct LogSettings {
    pub log_file: String,
    pub log_info: bool,
    pub log_warning: bool,
    pub log_error: bool,
    pub log_verbose_level: u32,
    pub log_format: String,
}

/// How the logging starts (the `--log-*` flags).
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    pub verbose: u32,
    pub info: bool,
    pub warning: bool,
    pub error: bool,
    /// `default` or `ISO8601`.
    pub format: String,
    /// A file to append lines to instead of the console.
    pub file: Option<std::path::PathBuf>,
}

/// A setting's new value, as either protocol carries it (`Null`: leave it as it is).
#[derive(Clone, Debug, PartialEq)]
pub enum SettingValue {
    Bool(bool),
    Uint(u32),
    Text(String),
    Null,
}

impl LogSettings {
    fn filter(&self) -> EnvFilter {
        let level = if !self.log_error {
            "off"
        } else if !self.log_warning {
            "error"
        } else if !self.log_info {
            "warn"
        } else if self.log_verbose_level > 0 {
            "debug"
        } else {
            "info"
        };
        EnvFilter::new(format!("{level},wasmtime=warn,cranelift=warn,hyper=warn,h2=warn,tower=warn"))
    }

    /// Applies named updates as tritonserver does: a `null` value changes nothing; the log file
    /// cannot be changed this way; unknown names or wrong types are errors and change nothing.
    pub fn updated(&self, updates: &[(String, SettingValue)]) -> Result<LogSettings, InferError> {
        let mut next = self.clone();
        for (key, value) in updates {
            let expect = |kind: &str| InferError::invalid(format!("expect {kind} for '{key}'"));
            match (key.as_str(), value) {
                (_, SettingValue::Null) => {}
                ("log_file", _) => {
                    return Err(InferError::unsupported(
                        "log file location can not be updated through network protocol",
                    ));
                }
                ("log_info", SettingValue::Bool(b)) => next.log_info = *b,
                ("log_warning", SettingValue::Bool(b)) => next.log_warning = *b,
                ("log_error", SettingValue::Bool(b)) => next.log_error = *b,
                ("log_verbose_level", SettingValue::Uint(n)) => next.log_verbose_level = *n,
                ("log_format", SettingValue::Text(f)) => {
                    next.log_format = LogFormat::parse(f)?.name().to_string();
                }
                ("log_info" | "log_warning" | "log_error", _) => return Err(expect("boolean")),
                ("log_verbose_level", _) => return Err(expect("int32")),
                ("log_format", _) => return Err(expect("string")),
                (other, _) => {
                    return Err(InferError::invalid(format!("unknown log setting '{other}'")));
                }
            }
        }
        Ok(next)
    }
}

/// tritonserver's two line formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// `I1125 06:48:54.627601 12454 file:line] message`
    Default,
    /// `2026-11-25T06:48:54Z I 12454 file:line] message`
    Iso8601,
}

impl LogFormat {
    /// `default` or `ISO8601`, with tritonserver's error for anything else.
    pub fn parse(name: &str) -> Result<Self, InferError> {
        match name {
            "default" => Ok(LogFormat::Default),
            "ISO8601" => Ok(LogFormat::Iso8601),
            other => Err(InferError::unavailable(format!("invalid argument for --log_format, got: {other}"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Default => "default",
            LogFormat::Iso8601 => "ISO8601",
        }
    }
}

/// Where lines go, and in which format; shared by the formatter and the settings.
struct Sink {
    iso8601: AtomicBool,
    escape: bool,
    file: Option<Mutex<File>>,
}

impl Sink {
    fn format(&self) -> LogFormat {
        if self.iso8601.load(Ordering::Relaxed) { LogFormat::Iso8601 } else { LogFormat::Default }
    }
}

/// Writes one formatted line: to the log file, or to the console stream of its level.
enum LineWriter<'a> {
    Stdout,
    Stderr,
    File(&'a Mutex<File>),
}

impl std::io::Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            LineWriter::Stdout => std::io::stdout().write(buf),
            LineWriter::Stderr => std::io::stderr().write(buf),
            LineWriter::File(file) => file.lock().write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        // One line, one call: lines from several threads never interleave.
        match self {
            LineWriter::Stdout => std::io::stdout().lock().write_all(buf),
            LineWriter::Stderr => std::io::stderr().lock().write_all(buf),
            LineWriter::File(file) => file.lock().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            LineWriter::Stdout => std::io::stdout().flush(),
            LineWriter::Stderr => std::io::stderr().flush(),
            LineWriter::File(file) => file.lock().flush(),
        }
    }
}

/// The subscriber's writer: the sink, chosen per line by its level.
#[derive(Clone, Copy)]
struct Sinks(&'static Sink);

impl<'a> MakeWriter<'a> for Sinks {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> LineWriter<'a> {
        match &self.0.file {
            Some(file) => LineWriter::File(file),
            None => LineWriter::Stdout,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> LineWriter<'a> {
        match (&self.0.file, *meta.level()) {
            (Some(file), _) => LineWriter::File(file),
            (None, Level::ERROR | Level::WARN) => LineWriter::Stderr,
            (None, _) => LineWriter::Stdout,
        }
    }
}

/// Formats an event as tritonserver's log line.
struct TritonLine(&'static Sink);

impl<S, N> FormatEvent<S, N> for TritonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let meta = event.metadata();
        let level = match *meta.level() {
            Level::ERROR => 'E',
            Level::WARN => 'W',
            _ => 'I',
        };
        let mut message = Message(String::new());
        event.record(&mut message);
        // Tables are the host's own text, laid out over several lines as tritonserver's are; their
        // cells are escaped where they are made (startup_summary).
        let raw = !self.0.escape || meta.target() == crate::startup_summary::TABLE_TARGET;
        let message = if raw { message.0 } else { serde_json::to_string(&message.0).unwrap_or_default() };
        let file = meta.file().map_or("", |f| f.rsplit('/').next().unwrap_or(f));
        let line = meta.line().unwrap_or(0);
        let pid = std::process::id();
        let t = UtcTime::now();
        match self.0.format() {
            LogFormat::Default => writeln!(
                writer,
                "{level}{:02}{:02} {:02}:{:02}:{:02}.{:06} {pid} {file}:{line}] {message}",
                t.month, t.day, t.hour, t.minute, t.second, t.micros
            ),
            LogFormat::Iso8601 => writeln!(
                writer,
                "{}-{:02}-{:02}T{:02}:{:02}:{:02}Z {level} {pid} {file}:{line}] {message}",
                t.year, t.month, t.day, t.hour, t.minute, t.second
            ),
        }
    }
}

/// An event's message, then its other fields as ` key=value`.
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// A moment in UTC, broken down (no time-zone database needed).
struct UtcTime {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    micros: u32,
}

impl UtcTime {
    fn now() -> Self {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Self::from_unix(since.as_secs(), since.subsec_micros())
    }

    /// Howard Hinnant's days-to-civil algorithm.
    fn from_unix(secs: u64, micros: u32) -> Self {
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        UtcTime { year, month, day, hour: rem / 3600, minute: rem % 3600 / 60, second: rem % 60, micros }
    }
}

type Handle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

struct Logging {
    settings: Mutex<LogSettings>,
    handle: Option<Handle>,
    sink: Option<&'static Sink>,
}

static LOGGING: OnceLock<Logging> = OnceLock::new();

fn state() -> &'static Logging {
    LOGGING.get_or_init(|| Logging {
        settings: Mutex::new(LogSettings {
            log_file: String::new(),
            log_info: true,
            log_warning: true,
            log_error: true,
            log_verbose_level: 0,
            log_format: "default".into(),
        }),
        handle: None,
        sink: None,
    })
}

/// Installs the process's subscriber (once, at start). `NEREUS_LOG` (a tracing filter) overrides
/// the settings' filter, for debugging. Fails when the log file cannot be opened.
pub fn init(options: &LogOptions) -> Result<(), String> {
    let format = LogFormat::parse(&options.format).map_err(|e| e.message)?;
    let file = match &options.file {
        Some(path) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("failed to open log file {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let escape = std::env::var("TRITON_SERVER_ESCAPE_LOG_MESSAGES").map_or(true, |v| v != "0");
    // The sink lives as long as the process: the subscriber is the process's.
    let sink: &'static Sink =
        Box::leak(Box::new(Sink { iso8601: AtomicBool::new(format == LogFormat::Iso8601), escape, file }));
    let settings = LogSettings {
        log_file: options.file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        log_info: options.info,
        log_warning: options.warning,
        log_error: options.error,
        log_verbose_level: options.verbose,
        log_format: format.name().to_string(),
    };
    let filter = EnvFilter::try_from_env("NEREUS_LOG").unwrap_or_else(|_| settings.filter());
    let (layer, handle) = reload::Layer::new(filter);
    let output = tracing_subscriber::fmt::layer().event_format(TritonLine(sink)).with_writer(Sinks(sink));
    tracing_subscriber::registry().with(layer).with(output).try_init().map_err(|e| e.to_string())?;
    let _ = LOGGING.set(Logging { settings: Mutex::new(settings), handle: Some(handle), sink: Some(sink) });
    Ok(())
}

/// The current settings.
pub fn settings() -> LogSettings {
    state().settings.lock().clone()
}

/// Applies updates and returns the settings now in force.
pub fn update(updates: &[(String, SettingValue)]) -> Result<LogSettings, InferError> {
    let logging = state();
    let mut current = logging.settings.lock();
    let next = current.updated(updates)?;
    if let Some(handle) = &logging.handle {
        handle.reload(next.filter()).map_err(|e| InferError::internal(format!("cannot apply log settings: {e}")))?;
    }
    if let Some(sink) = logging.sink {
        sink.iso8601.store(next.log_format == LogFormat::Iso8601.name(), Ordering::Relaxed);
    }
    *current = next.clone();
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_civil() {
        let t = UtcTime::from_unix(0, 0);
        assert_eq!((t.year, t.month, t.day, t.hour), (1970, 1, 1, 0));
        // 2026-11-25T06:48:54Z, and a leap day
        let t = UtcTime::from_unix(1_795_589_334, 627_601);
        assert_eq!((t.year, t.month, t.day, t.hour, t.minute, t.second, t.micros), (2026, 11, 25, 6, 48, 54, 627_601));
        let t = UtcTime::from_unix(951_782_400, 0);
        assert_eq!((t.year, t.month, t.day), (2000, 2, 29));
    }

    #[test]
    fn updates_are_typed_and_validated() {
        let s = state().settings.lock().clone();
        let n = s
            .updated(&[
                ("log_verbose_level".into(), SettingValue::Uint(2)),
                ("log_info".into(), SettingValue::Bool(false)),
            ])
            .unwrap();
        assert_eq!((n.log_verbose_level, n.log_info), (2, false));
        assert!(s.updated(&[("log_info".into(), SettingValue::Uint(1))]).is_err());
        assert!(s.updated(&[("nope".into(), SettingValue::Bool(true))]).is_err());
        let e = s.updated(&[("log_format".into(), SettingValue::Text("xml".into()))]).unwrap_err();
        assert_eq!(e.message, "invalid argument for --log_format, got: xml");
        let e = s.updated(&[("log_file".into(), SettingValue::Text("/tmp/x".into()))]).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Unsupported);
        // a null changes nothing
        assert_eq!(s.updated(&[("log_file".into(), SettingValue::Null)]).unwrap(), s);
    }
}
