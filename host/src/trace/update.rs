//! The trace extension's update request, read as tritonserver reads it (the same for HTTP's JSON
//! object and gRPC's `TraceSettingRequest`): `trace_file` cannot be changed over the network;
//! `trace_level` is a list (`["OFF"]` alone, or `TIMESTAMPS` and/or `TENSORS`; other names are
//! ignored); `trace_rate`, `trace_count` (≥ -1) and `log_frequency` are numbers in strings; a
//! cleared value (JSON `null`, an empty gRPC list) makes the field follow the global setting again.
//! Other keys are ignored.
use super::number::{self, NumberError};
use super::settings::{Change, SettingUpdate, TraceLevel};
use crate::error::InferError;

/// A setting's value as a request carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettingInput {
    /// JSON `null`, or a gRPC setting without values: clear the field.
    Clear,
    /// A JSON string.
    Text(String),
    /// A JSON array of strings, or a gRPC setting's values.
    List(Vec<String>),
    /// Anything else (a JSON number, object, array of non-strings…).
    Malformed,
}

/// Reads an update. Fields are read in tritonserver's order, so the first bad one is the one
/// reported.
pub fn parse(settings: &[(String, SettingInput)]) -> Result<SettingUpdate, InferError> {
    let find = |key: &str| settings.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    if find("trace_file").is_some() {
        return Err(InferError::unsupported("trace file location can not be updated through network protocol"));
    }
    let mut update = SettingUpdate::default();
    if let Some(input) = find("trace_level") {
        update.level = match input {
            SettingInput::Clear => Change::Clear,
            SettingInput::List(levels) => parse_levels(levels)?,
            SettingInput::Text(_) | SettingInput::Malformed => {
                return Err(InferError::internal("attempt to access JSON non-array as array"));
            }
        };
    }
    if let Some(input) = find("trace_rate") {
        update.rate = number_change(input, "trace_rate", |s| unsigned(s, "trace_rate"))?;
    }
    if let Some(input) = find("trace_count") {
        update.count = number_change(input, "trace_count", count)?;
    }
    if let Some(input) = find("log_frequency") {
        update.log_frequency = number_change(input, "log_frequency", |s| unsigned(s, "log_frequency"))?;
    }
    Ok(update)
}

/// `["OFF"]`, or the levels named (unknown names ignored: nothing named leaves the level as it is).
fn parse_levels(levels: &[String]) -> Result<Change<TraceLevel>, InferError> {
    let mut level = None;
    for name in levels {
        match name.as_str() {
            "OFF" if levels.len() == 1 => level = Some(TraceLevel::OFF),
            "OFF" => return Err(InferError::invalid("Expect only one trace level 'OFF' is specified")),
            "TIMESTAMPS" => level = Some(level.unwrap_or(TraceLevel::OFF).with(TraceLevel::TIMESTAMPS)),
            "TENSORS" => level = Some(level.unwrap_or(TraceLevel::OFF).with(TraceLevel::TENSORS)),
            _ => {}
        }
    }
    Ok(level.map_or(Change::Keep, Change::Set))
}

fn number_change<T>(
    input: &SettingInput,
    key: &str,
    parse: impl Fn(&str) -> Result<T, InferError>,
) -> Result<Change<T>, InferError> {
    match input {
        SettingInput::Clear => Ok(Change::Clear),
        SettingInput::Text(s) => parse(s).map(Change::Set),
        SettingInput::List(values) if values.len() == 1 => parse(&values[0]).map(Change::Set),
        SettingInput::List(_) => Err(InferError::invalid(format!("expect only 1 value for '{key}'"))),
        SettingInput::Malformed => Err(InferError::internal("attempt to access JSON non-string as string")),
    }
}

/// `trace_rate` and `log_frequency`: read as an `int` and kept as unsigned, as tritonserver does.
fn unsigned(s: &str, key: &str) -> Result<u32, InferError> {
    number::stoi(s).map(|v| v as u32).map_err(|e| match e {
        NumberError::Invalid => InferError::invalid(format!("Unable to parse '{key}', got: {s}")),
        NumberError::OutOfRange => {
            InferError::invalid(format!("Unable to parse '{key}', value is out of range [ 0, {} ], got: {s}", u32::MAX))
        }
    })
}

fn count(s: &str) -> Result<i32, InferError> {
    match number::stoi(s) {
        Ok(v) if v < -1 => {
            Err(InferError::invalid(format!("Unable to parse 'trace_count'. Expecting value >= -1, got: {s}")))
        }
        Ok(v) => Ok(v),
        Err(NumberError::Invalid) => Err(InferError::invalid(format!("Unable to parse 'trace_count', got: {s}"))),
        Err(NumberError::OutOfRange) => Err(InferError::invalid(format!(
            "Unable to parse 'trace_count', value is out of range [ -1, {} ], got: {s}",
            i32::MAX
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn text(k: &str, v: &str) -> (String, SettingInput) {
        (k.to_string(), SettingInput::Text(v.to_string()))
    }

    fn list(k: &str, v: &[&str]) -> (String, SettingInput) {
        (k.to_string(), SettingInput::List(v.iter().map(|s| s.to_string()).collect()))
    }

    #[test]
    fn an_update_sets_clears_and_keeps_fields() {
        let u = parse(&[
            list("trace_level", &["TIMESTAMPS", "TENSORS"]),
            text("trace_rate", "12"),
            ("trace_count".into(), SettingInput::Clear),
            list("log_frequency", &["34"]),
            text("unknown", "ignored"),
        ])
        .unwrap();
        assert_eq!(u.level, Change::Set(TraceLevel { timestamps: true, tensors: true }));
        assert_eq!((u.rate, u.count, u.log_frequency), (Change::Set(12), Change::Clear, Change::Set(34)));
        assert_eq!(parse(&[list("trace_level", &["OFF"])]).unwrap().level, Change::Set(TraceLevel::OFF));
        assert_eq!(parse(&[list("trace_level", &["LOUD"])]).unwrap().level, Change::Keep);
        assert_eq!(parse(&[]).unwrap(), SettingUpdate::default());
    }

    #[test]
    fn bad_updates_get_tritonservers_errors() {
        let err = |s: &[(String, SettingInput)]| parse(s).unwrap_err();
        let e = err(&[text("trace_rate", "1"), text("trace_file", "x.json")]);
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::Unsupported, "trace file location can not be updated through network protocol")
        );
        assert_eq!(
            err(&[list("trace_level", &["OFF", "TIMESTAMPS"])]).message,
            "Expect only one trace level 'OFF' is specified"
        );
        assert_eq!(err(&[text("trace_rate", "fast")]).message, "Unable to parse 'trace_rate', got: fast");
        assert_eq!(
            err(&[text("log_frequency", "10000000000")]).message,
            "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], got: 10000000000"
        );
        assert_eq!(
            err(&[text("trace_count", "10000000000")]).message,
            "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 10000000000"
        );
        assert_eq!(
            err(&[text("trace_count", "-2")]).message,
            "Unable to parse 'trace_count'. Expecting value >= -1, got: -2"
        );
        assert_eq!(err(&[list("trace_rate", &["1", "2"])]).message, "expect only 1 value for 'trace_rate'");
        assert_eq!(err(&[("trace_rate".into(), SettingInput::Malformed)]).kind, ErrorKind::Internal);
        assert_eq!(err(&[text("trace_level", "TIMESTAMPS")]).kind, ErrorKind::Internal);
    }
}
