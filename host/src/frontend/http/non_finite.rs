//! NaN and the infinities in the HTTP frontend's JSON, as tritonserver's JSON library (rapidjson,
//! with `kParseNanAndInfFlag` and `kWriteNanAndInfFlag`) reads and writes them: the bare tokens
//! `NaN`, `Infinity` and `-Infinity`, which strict JSON has no words for. Python's `json` (and so
//! tritonclient) reads and writes the same tokens, so a client's float tensor with an infinity
//! goes and comes back as it was; writing `null` instead turned it into NaN, and refusing the
//! tokens failed the request.
//!
//! serde_json knows neither way. Requests: only a header serde_json refuses is looked at again,
//! with the tokens outside strings rewritten as marked strings that [`value`] reads back (`Inf`
//! and `-Inf` too, which rapidjson also takes). Responses: a non-finite element is serialised as
//! an `i128` marker (a number type no response otherwise holds), which [`Tokens`], the response
//! writer's formatter, writes as its token.
use std::io;

use serde_json::Value;

/// The mark that starts a rewritten token's string: a NUL, which no JSON text holds unescaped.
const MARK: char = '\0';

/// `header` with every NaN or infinity token in a value's place rewritten as a marked string, or
/// `None` when it holds none (the parse error then stands as it is). Only where a value may stand
/// (after `:`, `[`, or `,` in an array; never in a string or where an object's key goes), so a
/// token as a key stays an error. A header that spells the mark itself (`\u0000`) is not rewritten,
/// so every marked string of a rewritten one is a token; the marks count only in a header that was
/// rewritten ([`value`]'s callers know), and where a number may be.
pub fn rewrite(header: &str) -> Option<String> {
    if header.as_bytes().windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u0000")) {
        return None;
    }
    const TOKENS: [(&str, &str); 5] = [
        ("-Infinity", "-Infinity"),
        ("-Inf", "-Infinity"),
        ("Infinity", "Infinity"),
        ("Inf", "Infinity"),
        ("NaN", "NaN"),
    ];
    let (bytes, mut out, mut copied, mut i) = (header.as_bytes(), String::new(), 0, 0);
    let mut in_string = false;
    // The open objects and arrays, innermost last; whether the next token is a value.
    let (mut open, mut value_next) = (Vec::new(), true);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1, // the escaped byte is skipped with it
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                open.push(b);
                value_next = b == b'[';
            }
            b'}' | b']' => {
                open.pop();
            }
            b':' => value_next = true,
            b',' => value_next = open.last() == Some(&b'['),
            _ => {}
        }
        if b == b'"' || !value_next {
            i += 1;
            continue;
        }
        // Bytes, not `str` slices: `i` may fall inside a character of a malformed header.
        let found = TOKENS.iter().find(|(token, _)| bytes[i..].starts_with(token.as_bytes()));
        match found {
            // A token, not the start of a longer word ("NaNa" stays an error).
            Some((token, value)) if !bytes.get(i + token.len()).is_some_and(|c| c.is_ascii_alphanumeric()) => {
                out.push_str(&header[copied..i]);
                out.push_str("\"\\u0000");
                out.push_str(value);
                out.push('"');
                i += token.len();
                copied = i;
            }
            _ => i += 1,
        }
    }
    (copied > 0).then(|| {
        out.push_str(&header[copied..]);
        out
    })
}

/// The number a JSON value stands for: a number, or, in a header that was rewritten (`tokens`), a
/// rewritten token.
pub fn value(v: &Value, tokens: bool) -> Option<f64> {
    v.as_f64().or_else(|| token(v).filter(|_| tokens))
}

/// Whether `s` is a rewritten token's string (in a header that was rewritten; see [`rewrite`]).
pub fn is_marked(s: &str) -> bool {
    s.starts_with(MARK)
}

/// A marked string's number; `None` for anything else.
pub fn token(v: &Value) -> Option<f64> {
    match v.as_str()?.strip_prefix(MARK)? {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// A non-finite element of a response, serialised as its `i128` marker for [`Tokens`].
pub struct NonFinite(pub f64);

const NAN: i128 = i128::MIN;
const INFINITY: i128 = i128::MAX;
const NEG_INFINITY: i128 = i128::MIN + 1;

impl serde::Serialize for NonFinite {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i128(match self.0 {
            v if v.is_nan() => NAN,
            v if v > 0.0 => INFINITY,
            _ => NEG_INFINITY,
        })
    }
}

/// serde_json's compact formatter, writing [`NonFinite`]'s markers as rapidjson's tokens.
pub struct Tokens;

impl serde_json::ser::Formatter for Tokens {
    fn write_i128<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: i128) -> io::Result<()> {
        match value {
            NAN => writer.write_all(b"NaN"),
            INFINITY => writer.write_all(b"Infinity"),
            NEG_INFINITY => writer.write_all(b"-Infinity"),
            v => serde_json::ser::CompactFormatter.write_i128(writer, v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_tokens_outside_strings_only() {
        let header = r#"{"a": [NaN, Infinity, -Infinity, Inf, -Inf, 1.5], "s": "NaN \" Infinity", "k": -1}"#;
        let rewritten = rewrite(header).unwrap();
        let v: Value = serde_json::from_str(&rewritten).unwrap();
        let a: Vec<f64> = v["a"].as_array().unwrap().iter().map(|x| value(x, true).unwrap()).collect();
        assert!(a[0].is_nan());
        assert_eq!(&a[1..], [f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY, 1.5]);
        assert_eq!(v["s"], "NaN \" Infinity");
        assert_eq!(token(&v["s"]), None);
        assert_eq!(v["k"], -1);
        // Where a key goes a token stays as it is (and the header an error).
        assert_eq!(rewrite(r#"{NaN: 1}"#), None);
        assert_eq!(rewrite(r#"{"a": 1, Infinity: 2}"#), None);
        assert!(rewrite(r#"{"a": {"b": [1, NaN]}, "c": -Inf}"#).is_some());
        // Characters of more than one byte outside strings (no JSON, but a client may send them).
        assert!(rewrite("{\"a\": [é NaN ü]}").is_some());
        assert_eq!(rewrite("{é: ü}"), None);
        // Nothing to rewrite, or a word that only starts like a token: the error stands.
        assert_eq!(rewrite(r#"{"a": [1, 2}"#), None);
        assert_eq!(rewrite(r#"{"a": [NaNa]}"#), None);
        assert!(serde_json::from_str::<Value>(&rewrite(r#"{"a": [Infinityx, NaN]}"#).unwrap()).is_err());
        // A client's own string with the mark: no rewrite, and not a number in a header as sent.
        assert_eq!(rewrite(r#"{"a": [NaN], "s": "\u0000NaN"}"#), None);
        let v: Value = serde_json::from_str(r#"["\u0000NaN"]"#).unwrap();
        assert_eq!(value(&v[0], false), None);
        assert_eq!(value(&serde_json::json!("NaN"), true), None);
    }

    #[test]
    fn writes_markers_as_tokens_and_other_numbers_as_numbers() {
        let mut out = Vec::new();
        let mut s = serde_json::Serializer::with_formatter(&mut out, Tokens);
        let items =
            (NonFinite(f64::NAN), NonFinite(f64::INFINITY), NonFinite(f64::NEG_INFINITY), 7i128, -3i64, 0.5f32, "NaN");
        serde::Serialize::serialize(&items, &mut s).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#"[NaN,Infinity,-Infinity,7,-3,0.5,"NaN"]"#);
    }
}
