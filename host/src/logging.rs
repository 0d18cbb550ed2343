//! Logging: the tracing subscriber, and Triton's logging extension (log settings readable and
//! changeable at run time over HTTP `/v2/logging` and gRPC `LogSettings`).
use std::sync::OnceLock;

use parking_lot::Mutex;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

use crate::error::InferError;

/// Triton's log settings. `log_file` is accepted only as "" (logs go to standard error).
#[derive(Clone, Debug, PartialEq)]
pub struct LogSettings {
    pub log_file: String,
    pub log_info: bool,
    pub log_warning: bool,
    pub log_error: bool,
    pub log_verbose_level: u32,
    pub log_format: String,
}

/// A setting's new value, as either protocol carries it.
#[derive(Clone, Debug, PartialEq)]
pub enum SettingValue {
    Bool(bool),
    Uint(u32),
    Text(String),
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

    /// Applies named updates; unknown names or wrong types are errors and change nothing.
    pub fn updated(&self, updates: &[(String, SettingValue)]) -> Result<LogSettings, InferError> {
        let mut next = self.clone();
        for (key, value) in updates {
            let bad = || InferError::invalid(format!("log setting '{key}' has the wrong type"));
            match (key.as_str(), value) {
                ("log_file", SettingValue::Text(f)) if f.is_empty() => next.log_file.clear(),
                ("log_file", SettingValue::Text(_)) => {
                    return Err(InferError::unsupported(
                        "logging to a file is not supported; logs go to standard error",
                    ));
                }
                ("log_info", SettingValue::Bool(b)) => next.log_info = *b,
                ("log_warning", SettingValue::Bool(b)) => next.log_warning = *b,
                ("log_error", SettingValue::Bool(b)) => next.log_error = *b,
                ("log_verbose_level", SettingValue::Uint(n)) => next.log_verbose_level = *n,
                ("log_format", SettingValue::Text(f)) if f == "default" || f == "ISO8601" => {
                    next.log_format = f.clone()
                }
                ("log_format", SettingValue::Text(f)) => {
                    return Err(InferError::invalid(format!(
                        "log_format must be \"default\" or \"ISO8601\", not \"{f}\""
                    )));
                }
                ("log_file" | "log_info" | "log_warning" | "log_error" | "log_verbose_level" | "log_format", _) => {
                    return Err(bad());
                }
                (other, _) => {
                    return Err(InferError::invalid(format!("unknown log setting '{other}'")));
                }
            }
        }
        Ok(next)
    }
}

type Handle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

struct Logging {
    settings: Mutex<LogSettings>,
    handle: Option<Handle>,
}

static LOGGING: OnceLock<Logging> = OnceLock::new();

fn state() -> &'static Logging {
    LOGGING.get_or_init(|| Logging { settings: Mutex::new(default_settings(0)), handle: None })
}

fn default_settings(verbose: u32) -> LogSettings {
    LogSettings {
        log_file: String::new(),
        log_info: true,
        log_warning: true,
        log_error: true,
        log_verbose_level: verbose,
        log_format: "default".into(),
    }
}

/// Whether log lines may carry colour: only on a terminal, and not when `NO_COLOR` is set to
/// anything non-empty (no-color.org). Files, pipes and log collectors get plain text.
fn colour(stream_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stream_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the process's subscriber, writing to standard error as tritonserver does.
/// `NEREUS_LOG` (a tracing filter) overrides the settings' filter, for debugging.
pub fn init(verbose: u32) {
    use std::io::IsTerminal;
    let settings = default_settings(verbose);
    let filter = EnvFilter::try_from_env("NEREUS_LOG").unwrap_or_else(|_| settings.filter());
    let (layer, handle) = reload::Layer::new(filter);
    let ansi = colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR"));
    let output = tracing_subscriber::fmt::layer().with_target(false).with_ansi(ansi).with_writer(std::io::stderr);
    tracing_subscriber::registry().with(layer).with(output).init();
    let _ = LOGGING.set(Logging { settings: Mutex::new(settings), handle: Some(handle) });
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
    *current = next.clone();
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(!colour(false, None));
        assert!(!colour(true, Some("1".into())));
        // an empty NO_COLOR does not count (no-color.org)
        assert!(colour(true, Some("".into())));
    }

    #[test]
    fn updates_are_typed_and_validated() {
        let s = default_settings(0);
        let n = s
            .updated(&[
                ("log_verbose_level".into(), SettingValue::Uint(2)),
                ("log_info".into(), SettingValue::Bool(false)),
            ])
            .unwrap();
        assert_eq!((n.log_verbose_level, n.log_info), (2, false));
        assert!(s.updated(&[("log_info".into(), SettingValue::Uint(1))]).is_err());
        assert!(s.updated(&[("nope".into(), SettingValue::Bool(true))]).is_err());
        assert!(s.updated(&[("log_format".into(), SettingValue::Text("xml".into()))]).is_err());
    }
}
