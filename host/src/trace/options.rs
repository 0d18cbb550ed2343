//! The tracing flags, read as tritonserver reads them: `--trace-config [<mode>,]<setting>=<value>`
//! (global settings `level`, `rate`, `count`, `mode`; `triton,file=…`, `triton,log-frequency=…`;
//! `opentelemetry,url=…`, `opentelemetry,resource=<key>=<value>`,
//! `opentelemetry,bsp_max_queue_size=…`, `bsp_schedule_delay=…`, `bsp_max_export_batch_size=…`),
//! and the deprecated `--trace-file`, `--trace-level`, `--trace-rate`, `--trace-count` and
//! `--trace-log-frequency`, which `--trace-config` overrides. Defaults: level OFF, rate 1000, count
//! -1, log frequency 0, mode `triton`, no file.
use std::time::Duration;

use super::export::ExportOptions;
use super::number::{self, NumberError};
use super::settings::{SettingValues, TraceLevel, TraceMode};

/// The tracing flags as given.
#[derive(Clone, Debug, Default)]
pub struct TraceFlags {
    /// `--trace-config`, in order.
    pub config: Vec<String>,
    pub file: Option<String>,
    /// `--trace-level`, each occurrence.
    pub level: Vec<String>,
    pub rate: Option<String>,
    pub count: Option<String>,
    pub log_frequency: Option<String>,
}

/// Tracing as the flags set it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    /// The global setting, and what clearing its fields restores.
    pub values: SettingValues,
    pub mode: TraceMode,
    /// The mode's own settings, in order, as the trace extension reports them (OpenTelemetry mode:
    /// with the batch span processor's defaults after the ones given).
    pub reported: Vec<(String, String)>,
    /// OpenTelemetry mode: the exporter's settings.
    pub export: Option<ExportOptions>,
}

impl Default for TraceOptions {
    /// Tracing off.
    fn default() -> Self {
        TraceOptions {
            values: SettingValues {
                level: TraceLevel::OFF,
                rate: 1000,
                count: -1,
                log_frequency: 0,
                file: String::new(),
            },
            mode: TraceMode::Triton,
            reported: Vec::new(),
            export: None,
        }
    }
}

/// OTLP/HTTP's default traces endpoint.
const DEFAULT_URL: &str = "http://localhost:4318/v1/traces";

/// The `service.name` tritonserver gives its spans (`resource=service.name=…` replaces it).
const SERVICE_NAME: &str = "triton-inference-server";

fn parse_mode(value: &str) -> Result<TraceMode, String> {
    match value.to_lowercase().as_str() {
        "triton" => Ok(TraceMode::Triton),
        "opentelemetry" => Ok(TraceMode::OpenTelemetry),
        _ => Err(format!(
            "invalid value for trace mode option: {}. Available options are \"triton\" and \"opentelemetry\"",
            value.to_lowercase()
        )),
    }
}

fn parse_level(value: &str) -> Result<TraceLevel, String> {
    let value = value.to_lowercase();
    match value.as_str() {
        "false" | "off" => Ok(TraceLevel::OFF),
        "true" | "on" | "min" | "max" | "timestamps" => Ok(TraceLevel::TIMESTAMPS),
        "tensors" => Ok(TraceLevel::TENSORS),
        _ => Err(format!("invalid value for trace level option: {value}")),
    }
}

/// tritonserver's `ParseOption<int>`.
fn parse_int(value: &str) -> Result<i32, String> {
    number::stoi(value).map_err(|e| match e {
        NumberError::Invalid => format!("Invalid option value. Got {value}"),
        NumberError::OutOfRange => format!("Provided option value is out of bound. Got {value}"),
    })
}

/// tritonserver's `ParseOption<uint32_t>` (`std::stoul`, kept to 32 bits).
fn parse_u32(value: &str) -> Result<u32, String> {
    number::stoul(value).map(|v| v as u32).map_err(|e| match e {
        NumberError::Invalid => format!("Invalid option value. Got {value}"),
        NumberError::OutOfRange => format!("Provided option value is out of bound. Got {value}"),
    })
}

/// One `--trace-config` value: its mode (`None`: a global setting), setting and value.
fn split_config(arg: &str) -> Result<(Option<TraceMode>, String, String), String> {
    let format = || format!("--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}");
    let (mode, rest) = match arg.find(',') {
        Some(0) => {
            return Err(format!(
                "No trace mode specified. --trace-config option format is <trace mode>,<setting>=<value> or <setting>=<value>. Got {arg}"
            ));
        }
        Some(i) => (Some(parse_mode(&arg[..i])?), &arg[i + 1..]),
        None => (None, arg),
    };
    let (setting, value) = rest.split_once('=').ok_or_else(format)?;
    if setting.is_empty() || value.is_empty() {
        return Err(format());
    }
    Ok((mode, setting.to_string(), value.to_string()))
}

/// Reads the flags; `env` looks up environment variables (the OpenTelemetry SDK's `OTEL_*`).
/// Returns the options and the warnings tritonserver prints for them.
pub fn parse(flags: &TraceFlags, env: &dyn Fn(&str) -> Option<String>) -> Result<(TraceOptions, Vec<String>), String> {
    let mut o = TraceOptions::default();
    let mut warnings = Vec::new();
    let mut disabled = false;
    let deprecated = |flag: &str, instead: &str| {
        format!(
            "'--{flag}' has been deprecated and will be removed in future releases. Please use '--trace-config {instead} instead."
        )
    };
    if let Some(file) = &flags.file {
        warnings.push(deprecated("trace-file", "triton,file=<filepath>"));
        o.values.file = file.clone();
    }
    for level in &flags.level {
        warnings.push(deprecated("trace-level", "level=<OFF|TIMESTAMPS|TENSORS>"));
        let parsed = parse_level(level)?;
        disabled |= parsed.is_off();
        o.values.level = o.values.level.with(parsed);
    }
    if let Some(rate) = &flags.rate {
        warnings.push(deprecated("trace-rate", "rate=<rate value>"));
        o.values.rate = parse_int(rate)? as u32;
    }
    if let Some(count) = &flags.count {
        warnings.push(deprecated("trace-count", "count=<count value>"));
        o.values.count = parse_int(count)?;
    }
    if let Some(frequency) = &flags.log_frequency {
        warnings.push(deprecated("trace-log-frequency", "triton,log-frequency=<log frequency value>"));
        o.values.log_frequency = parse_int(frequency)? as u32;
    }
    let mut global = Vec::new();
    let mut triton = Vec::new();
    let mut opentelemetry = Vec::new();
    for arg in &flags.config {
        let (mode, setting, value) = split_config(arg)?;
        match mode {
            None => global.push((setting, value)),
            Some(TraceMode::Triton) => triton.push((setting, value)),
            Some(TraceMode::OpenTelemetry) => opentelemetry.push((setting, value)),
        }
    }
    let overriding = |flag: &str, what: &str| {
        format!("Overriding deprecated '--{flag}' in favor of provided {what} in --trace-config!")
    };
    for (setting, value) in &global {
        let bad = |e: String| format!("Bad option: \"--trace-config {setting}\".\n{e}");
        match setting.as_str() {
            "rate" => {
                if flags.rate.is_some() {
                    warnings.push(overriding("trace-rate", "rate value"));
                }
                o.values.rate = parse_int(value).map_err(bad)? as u32;
            }
            "level" => {
                if !flags.level.is_empty() {
                    warnings.push(overriding("trace-level", "level"));
                }
                let parsed = parse_level(value).map_err(bad)?;
                disabled |= parsed.is_off();
                o.values.level = o.values.level.with(parsed);
            }
            "mode" => o.mode = parse_mode(value).map_err(bad)?,
            "count" => {
                if flags.count.is_some() {
                    warnings.push(overriding("trace-count", "count"));
                }
                o.values.count = parse_int(value).map_err(bad)?;
            }
            _ => {}
        }
    }
    match o.mode {
        TraceMode::Triton => {
            for (setting, value) in triton {
                let bad = |e: String| format!("Bad option: \"--trace-config triton,{setting}\".\n{e}");
                match setting.as_str() {
                    "file" => {
                        if flags.file.is_some() {
                            warnings.push(overriding("trace-file", "file"));
                        }
                        o.values.file = value;
                    }
                    "log-frequency" => {
                        if flags.log_frequency.is_some() {
                            warnings.push(overriding("trace-log-frequency", "log-frequency"));
                        }
                        o.values.log_frequency = parse_int(&value).map_err(bad)? as u32;
                    }
                    _ => o.reported.push((setting, value)),
                }
            }
        }
        TraceMode::OpenTelemetry => {
            if flags.file.is_some() {
                warnings
                    .push("'--trace-file' is deprecated and will be ignored with opentelemetry tracing mode.".into());
            }
            if flags.log_frequency.is_some() {
                warnings.push(
                    "'--trace-log-frequency' is deprecated and will be ignored with opentelemetry tracing mode.".into(),
                );
            }
            let (reported, export) = opentelemetry_settings(opentelemetry, env)?;
            o.reported = reported;
            o.export = Some(export);
        }
    }
    if disabled {
        o.level_off();
    }
    Ok((o, warnings))
}

impl TraceOptions {
    fn level_off(&mut self) {
        self.values.level = TraceLevel::OFF;
    }
}

/// The batch span processor's settings: given, else from `OTEL_BSP_*`, else the SDK's defaults.
const BSP: [(&str, &str, &str); 3] = [
    ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
    ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
    ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
];

/// OpenTelemetry mode's settings: what the trace extension reports (the batch span processor's
/// numbers as read), and the exporter's options.
fn opentelemetry_settings(
    given: Vec<(String, String)>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<(String, String)>, ExportOptions), String> {
    let mut reported = Vec::new();
    let mut bsp = [None; 3];
    let mut url = None;
    let mut resource = resource_from_env(env);
    resource.push(("service.name".to_string(), SERVICE_NAME.to_string()));
    for (setting, value) in given {
        if let Some(i) = BSP.iter().position(|(name, _, _)| *name == setting) {
            let n = parse_u32(&value)
                .map_err(|e| format!("Bad option: \"--trace-config opentelemetry,{setting}\".\n{e}"))?;
            bsp[i] = Some(n);
            reported.push((setting, n.to_string()));
            continue;
        }
        match setting.as_str() {
            "url" => url = Some(value.clone()),
            "resource" => {
                // As tritonserver splits it: at the first `=`; without one, key and value are the same.
                let (k, v) = value.split_once('=').unwrap_or((&value, &value));
                resource.push((k.to_string(), v.to_string()));
            }
            _ => {}
        }
        reported.push((setting, value));
    }
    for (i, (name, variable, default)) in BSP.iter().enumerate() {
        if bsp[i].is_none() {
            let value = env(variable).unwrap_or_else(|| default.to_string());
            let n = parse_u32(&value).map_err(|e| format!("Bad option: \"{variable}\".\n{e}"))?;
            bsp[i] = Some(n);
            reported.push((name.to_string(), n.to_string()));
        }
    }
    let [queue, delay, batch] = bsp.map(Option::unwrap_or_default);
    let url = url
        .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| format!("{}/v1/traces", e.trim_end_matches('/'))))
        .unwrap_or_else(|| DEFAULT_URL.to_string());
    // A URL without a scheme (tritonserver's own tests give `localhost:10000/v1/traces`) is http.
    let url = if url.contains("://") { url } else { format!("http://{url}") };
    let headers = env("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"));
    let timeout = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(10_000);
    let export = ExportOptions {
        url,
        resource,
        headers: headers.as_deref().map(key_values).unwrap_or_default(),
        max_queue_size: queue as usize,
        schedule_delay: Duration::from_millis(u64::from(delay)),
        max_export_batch_size: batch as usize,
        timeout: Duration::from_millis(timeout),
    };
    Ok((reported, export))
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value,…`, percent-encoded.
fn resource_from_env(env: &dyn Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    env("OTEL_RESOURCE_ATTRIBUTES").as_deref().map(key_values).unwrap_or_default()
}

/// `key=value,…` with percent-encoded keys and values, as the `OTEL_*` variables hold them.
fn key_values(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k.trim()), percent_decode(v.trim())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(config: &[&str]) -> TraceFlags {
        TraceFlags { config: config.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn options(config: &[&str]) -> TraceOptions {
        parse(&flags(config), &no_env).unwrap().0
    }

    #[test]
    fn defaults_are_tritonservers() {
        let o = options(&[]);
        assert_eq!(o, TraceOptions::default());
        assert_eq!((o.values.rate, o.values.count, o.mode), (1000, -1, TraceMode::Triton));
        assert!(o.values.level.is_off());
    }

    #[test]
    fn triton_mode_settings() {
        // qa/L0_trace/test.sh's flags.
        let o = options(&["triton,file=bls_trace.log", "level=TIMESTAMPS", "rate=4", "count=6", "mode=triton"]);
        assert_eq!(
            o.values,
            SettingValues {
                level: TraceLevel::TIMESTAMPS,
                rate: 4,
                count: 6,
                log_frequency: 0,
                file: "bls_trace.log".into()
            }
        );
        assert!(o.reported.is_empty() && o.export.is_none());
        let o = options(&[
            "triton,log-frequency=50",
            "triton,file=t.json",
            "triton,other=x",
            "opentelemetry,url=ignored:1",
        ]);
        assert_eq!((o.values.log_frequency, o.values.file.as_str()), (50, "t.json"));
        assert_eq!(o.reported, vec![("other".to_string(), "x".to_string())]);
        // Levels add up; OFF anywhere turns tracing off.
        let o = options(&["level=TIMESTAMPS", "level=tensors"]);
        assert_eq!(o.values.level, TraceLevel { timestamps: true, tensors: true });
        assert!(options(&["level=TIMESTAMPS", "level=OFF"]).values.level.is_off());
    }

    #[test]
    fn opentelemetry_mode_settings() {
        let o = options(&[
            "mode=opentelemetry",
            "opentelemetry,resource=test.key=test.value",
            "opentelemetry,resource=service.name=test_triton",
            "opentelemetry,url=localhost:10000/v1/traces",
            "opentelemetry,bsp_max_queue_size=0010",
            "triton,file=ignored.json",
        ]);
        assert_eq!(o.mode, TraceMode::OpenTelemetry);
        assert_eq!(o.values.file, "");
        let reported: Vec<(&str, &str)> = o.reported.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            reported,
            [
                ("resource", "test.key=test.value"),
                ("resource", "service.name=test_triton"),
                ("url", "localhost:10000/v1/traces"),
                ("bsp_max_queue_size", "10"),
                ("bsp_schedule_delay", "5000"),
                ("bsp_max_export_batch_size", "512"),
            ]
        );
        let export = o.export.unwrap();
        assert_eq!(export.url, "http://localhost:10000/v1/traces");
        assert_eq!((export.max_queue_size, export.max_export_batch_size), (10, 512));
        assert_eq!(export.schedule_delay, Duration::from_secs(5));
        // The later service.name replaces tritonserver's when the exporter builds the resource.
        assert_eq!(export.resource.last().unwrap(), &("service.name".to_string(), "test_triton".to_string()));
        assert!(export.resource.contains(&("service.name".to_string(), SERVICE_NAME.to_string())));
    }

    #[test]
    fn the_sdks_environment_variables_fill_in_what_the_flags_leave_out() {
        let env = |name: &str| match name {
            "OTEL_BSP_SCHEDULE_DELAY" => Some("250".to_string()),
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://collector:4318/".to_string()),
            "OTEL_RESOURCE_ATTRIBUTES" => Some("deployment.environment=prod,team=a%2Cb".to_string()),
            _ => None,
        };
        let (o, _) = parse(&flags(&["mode=opentelemetry"]), &env).unwrap();
        let export = o.export.unwrap();
        assert_eq!(export.url, "http://collector:4318/v1/traces");
        assert_eq!(export.schedule_delay, Duration::from_millis(250));
        assert!(export.resource.contains(&("team".to_string(), "a,b".to_string())));
        assert!(o.reported.contains(&("bsp_schedule_delay".to_string(), "250".to_string())));
        let default = options(&["mode=opentelemetry"]).export.unwrap();
        assert_eq!(default.url, DEFAULT_URL);
    }

    #[test]
    fn bad_flags_are_refused_with_tritonservers_messages() {
        let err = |config: &[&str]| parse(&flags(config), &no_env).unwrap_err();
        assert_eq!(err(&["rate=fast"]), "Bad option: \"--trace-config rate\".\nInvalid option value. Got fast");
        assert_eq!(
            err(&["count=99999999999"]),
            "Bad option: \"--trace-config count\".\nProvided option value is out of bound. Got 99999999999"
        );
        assert_eq!(
            err(&["level=loud"]),
            "Bad option: \"--trace-config level\".\ninvalid value for trace level option: loud"
        );
        assert!(err(&["mode=jaeger"]).contains("invalid value for trace mode option: jaeger"));
        assert!(err(&["zipkin,url=x"]).contains("invalid value for trace mode option: zipkin"));
        assert!(err(&[",rate=1"]).starts_with("No trace mode specified."));
        for bad in ["rate", "rate=", "=1", "triton,file"] {
            assert!(err(&[bad]).starts_with("--trace-config option format is"), "{bad}");
        }
        assert!(
            err(&["mode=opentelemetry", "opentelemetry,bsp_schedule_delay=soon"])
                .starts_with("Bad option: \"--trace-config opentelemetry,bsp_schedule_delay\"")
        );
    }

    #[test]
    fn the_deprecated_flags_still_work_and_trace_config_overrides_them() {
        let f = TraceFlags {
            file: Some("old.json".into()),
            level: vec!["TIMESTAMPS".into()],
            rate: Some("10".into()),
            count: Some("3".into()),
            log_frequency: Some("2".into()),
            config: vec!["rate=20".into()],
        };
        let (o, warnings) = parse(&f, &no_env).unwrap();
        assert_eq!(
            o.values,
            SettingValues {
                level: TraceLevel::TIMESTAMPS,
                rate: 20,
                count: 3,
                log_frequency: 2,
                file: "old.json".into()
            }
        );
        assert!(warnings.iter().any(|w| w.contains("'--trace-rate' has been deprecated")));
        assert!(warnings.iter().any(|w| w.contains("Overriding deprecated '--trace-rate'")));
    }
}
