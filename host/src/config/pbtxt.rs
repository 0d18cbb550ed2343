//! A protobuf text-format parser that accepts what real Triton `config.pbtxt` files contain.
//!
//! prost-reflect's own text-format parser rejects Triton's habit of writing a list of messages
//! without a colon (`input [ { … } ]`), so this one is written against the descriptor directly:
//! it walks the schema by field name, accepts `field: value`, `field { … }`, `field: { … }`,
//! `field [ … ]` and `field: [ … ]` (lists of scalars or messages), `< … >` message delimiters,
//! optional `,`/`;` separators, `#` comments, enums by name or number, adjacent string literals,
//! and map fields written either as repeated `{ key: … value: … }` entries or as a list of them.
//! Every error names the line and column and the field it concerns.
use std::collections::HashMap;

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value};

/// A parse error with its position in the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    /// A number literal as written (sign handled by the parser).
    Number(String),
    Str(Vec<u8>),
    Punct(char),
}

#[derive(Clone, Debug)]
struct Spanned {
    token: Token,
    line: usize,
    column: usize,
}

fn tokenize(src: &str) -> Result<Vec<Spanned>, ParseError> {
    let bytes = src.as_bytes();
    let (mut i, mut line, mut line_start) = (0usize, 1usize, 0usize);
    let mut out = Vec::new();
    while i < bytes.len() {
        let c = bytes[i];
        let column = i - line_start + 1;
        let err = |message: String| ParseError { line, column, message };
        match c {
            b'\n' => {
                i += 1;
                line += 1;
                line_start = i;
            }
            c if c.is_ascii_whitespace() => i += 1,
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b':' | b',' | b';' => {
                out.push(Spanned { token: Token::Punct(c as char), line, column });
                i += 1;
            }
            b'"' | b'\'' => {
                let quote = c;
                i += 1;
                let mut value = Vec::new();
                loop {
                    let Some(&b) = bytes.get(i) else {
                        return Err(err("unterminated string".into()));
                    };
                    match b {
                        b'\n' => return Err(err("newline inside a string".into())),
                        b if b == quote => {
                            i += 1;
                            break;
                        }
                        b'\\' => {
                            let esc = *bytes.get(i + 1).ok_or_else(|| err("unterminated escape".into()))?;
                            i += 2;
                            match esc {
                                b'n' => value.push(b'\n'),
                                b't' => value.push(b'\t'),
                                b'r' => value.push(b'\r'),
                                b'a' => value.push(7),
                                b'b' => value.push(8),
                                b'f' => value.push(12),
                                b'v' => value.push(11),
                                b'\\' | b'\'' | b'"' | b'?' => value.push(esc),
                                b'x' | b'X' => {
                                    let start = i;
                                    while i < bytes.len() && i - start < 2 && bytes[i].is_ascii_hexdigit() {
                                        i += 1;
                                    }
                                    let hex = std::str::from_utf8(&bytes[start..i]).unwrap_or("");
                                    let v = u8::from_str_radix(hex, 16).map_err(|_| err("bad \\x escape".into()))?;
                                    value.push(v);
                                }
                                b'0'..=b'7' => {
                                    let start = i - 1;
                                    while i < bytes.len() && i - start < 3 && (b'0'..=b'7').contains(&bytes[i]) {
                                        i += 1;
                                    }
                                    let oct = std::str::from_utf8(&bytes[start..i]).unwrap_or("");
                                    let v = u16::from_str_radix(oct, 8).map_err(|_| err("bad octal escape".into()))?;
                                    value.push(u8::try_from(v).map_err(|_| err("octal escape out of range".into()))?);
                                }
                                other => {
                                    return Err(err(format!("unknown escape '\\{}'", other as char)));
                                }
                            }
                        }
                        _ => {
                            value.push(b);
                            i += 1;
                        }
                    }
                }
                // Adjacent literals concatenate, as in C and protobuf text format.
                if let Some(Spanned { token: Token::Str(prev), .. }) = out.last_mut() {
                    prev.extend_from_slice(&value);
                } else {
                    out.push(Spanned { token: Token::Str(value), line, column });
                }
            }
            c if c.is_ascii_digit() || c == b'-' || c == b'+' || c == b'.' => {
                let start = i;
                i += 1;
                while i < bytes.len() {
                    let b = bytes[i];
                    let exp_sign = (b == b'-' || b == b'+')
                        && matches!(bytes[i - 1], b'e' | b'E')
                        && !bytes[start..i].starts_with(b"0x");
                    if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || exp_sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                out.push(Spanned { token: Token::Number(src[start..i].to_string()), line, column });
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
                    i += 1;
                }
                out.push(Spanned { token: Token::Ident(src[start..i].to_string()), line, column });
            }
            other => return Err(err(format!("unexpected character '{}'", other as char))),
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Spanned>,
    pos: usize,
    /// Position of the end of input, for "unexpected end" errors.
    end: (usize, usize),
    /// The field path being parsed, e.g. `["input[1]", "dims"]`.
    path: Vec<String>,
    lines: SourceLines,
}

/// Where each field path (`max_batch_size`, `input[1]`, `instance_group[0].count`) starts in the
/// file, so that validation errors can name the line as parse errors do.
#[derive(Clone, Debug, Default)]
pub struct SourceLines(HashMap<String, usize>);

impl SourceLines {
    /// The line where `path` (or, failing that, its closest recorded parent) starts.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut p = path;
        loop {
            if let Some(line) = self.0.get(p) {
                return Some(*line);
            }
            p = &p[..p.rfind('.')?];
        }
    }
}

/// Nesting limit: config files are shallow; a hostile file must not overflow the stack.
const MAX_DEPTH: usize = 64;

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos).map(|s| &s.token)
    }

    fn here(&self) -> (usize, usize) {
        self.tokens.get(self.pos).map(|s| (s.line, s.column)).unwrap_or(self.end)
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        let (line, column) = self.here();
        ParseError { line, column, message: message.into() }
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).map(|s| s.token.clone());
        self.pos += 1;
        t
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_separator(&mut self) {
        if !self.eat(',') {
            self.eat(';');
        }
    }

    /// Parses fields into `msg` until `close` (or the end of input when `close` is None).
    fn message_body(&mut self, msg: &mut DynamicMessage, close: Option<char>, depth: usize) -> Result<(), ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.error("messages nested too deeply"));
        }
        loop {
            match (self.peek(), close) {
                (None, None) => return Ok(()),
                (None, Some(c)) => {
                    return Err(self.error(format!("expected '{c}' before the end of the file")));
                }
                (Some(Token::Punct(p)), Some(c)) if *p == c => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => {}
            }
            self.field(msg, depth)?;
            self.skip_separator();
        }
    }

    fn field(&mut self, msg: &mut DynamicMessage, depth: usize) -> Result<(), ParseError> {
        let desc = msg.descriptor();
        let (line, column) = self.here();
        let name = match self.next() {
            Some(Token::Ident(name)) => name,
            Some(Token::Punct('[')) => {
                return Err(ParseError { line, column, message: "extension and Any fields are not supported".into() });
            }
            other => {
                return Err(ParseError {
                    line,
                    column,
                    message: format!("expected a field name, found {}", describe(other.as_ref())),
                });
            }
        };
        let field = desc.get_field_by_name(&name).ok_or_else(|| ParseError {
            line,
            column,
            message: format!("unknown field '{name}' in {}", desc.full_name()),
        })?;
        let colon = self.eat(':');
        let is_message = matches!(field.kind(), Kind::Message(_));
        if !colon && !is_message {
            return Err(self.error(format!("expected ':' after field '{name}'")));
        }
        if self.eat('[') {
            if !field.is_list() && !field.is_map() {
                return Err(self.error(format!("field '{name}' is not repeated")));
            }
            if self.eat(']') {
                return Ok(());
            }
            loop {
                self.value_into(msg, &field, depth)?;
                if self.eat(']') {
                    return Ok(());
                }
                if !self.eat(',') {
                    return Err(self.error(format!("expected ',' or ']' in the list of '{name}'")));
                }
            }
        }
        self.value_into(msg, &field, depth)
    }

    /// Parses one value of `field` and stores it (appending for repeated and map fields).
    fn value_into(
        &mut self,
        msg: &mut DynamicMessage,
        field: &FieldDescriptor,
        depth: usize,
    ) -> Result<(), ParseError> {
        let segment = match msg.get_field(field).as_ref() {
            Value::List(items) if field.is_list() => format!("{}[{}]", field.name(), items.len()),
            _ => field.name().to_string(),
        };
        let (line, _) = self.here();
        // Both `input[1]` and the field as a whole (`input`) get the line of their first value.
        self.path.push(field.name().to_string());
        self.lines.0.entry(self.path.join(".")).or_insert(line);
        self.path.pop();
        self.path.push(segment);
        self.lines.0.entry(self.path.join(".")).or_insert(line);
        let result = self.value_into_inner(msg, field, depth);
        self.path.pop();
        result
    }

    fn value_into_inner(
        &mut self,
        msg: &mut DynamicMessage,
        field: &FieldDescriptor,
        depth: usize,
    ) -> Result<(), ParseError> {
        let value = match field.kind() {
            Kind::Message(m) => {
                let close = if self.eat('{') {
                    '}'
                } else if self.eat('<') {
                    '>'
                } else {
                    return Err(self.error(format!("expected '{{' to open message field '{}'", field.name())));
                };
                let mut sub = DynamicMessage::new(m);
                self.message_body(&mut sub, Some(close), depth + 1)?;
                Value::Message(sub)
            }
            kind => self.scalar(&kind, field.name())?,
        };
        if field.is_map() {
            let Value::Message(entry) = value else { unreachable!("map entries are messages") };
            let Kind::Message(entry_desc) = field.kind() else { unreachable!() };
            let key_field = entry_desc.map_entry_key_field();
            let value_field = entry_desc.map_entry_value_field();
            let key = map_key(entry.get_field(&key_field).into_owned())
                .ok_or_else(|| self.error(format!("bad key in map '{}'", field.name())))?;
            let val = entry.get_field(&value_field).into_owned();
            if let Value::Map(map) = msg.get_field_mut(field) {
                map.insert(key, val);
            }
        } else if field.is_list() {
            if let Value::List(list) = msg.get_field_mut(field) {
                list.push(value);
            }
        } else {
            msg.set_field(field, value);
        }
        Ok(())
    }

    fn scalar(&mut self, kind: &Kind, field: &str) -> Result<Value, ParseError> {
        let (line, column) = self.here();
        let err = |message: String| ParseError { line, column, message };
        let token = self.next();
        let bad = |what: &str| err(format!("field '{field}' expects {what}, found {}", describe(token.as_ref())));
        Ok(match kind {
            Kind::String => match &token {
                Some(Token::Str(s)) => Value::String(
                    String::from_utf8(s.clone()).map_err(|_| err(format!("field '{field}': string is not UTF-8")))?,
                ),
                _ => return Err(bad("a string")),
            },
            Kind::Bytes => match &token {
                Some(Token::Str(s)) => Value::Bytes(s.clone().into()),
                _ => return Err(bad("a string")),
            },
            Kind::Bool => match &token {
                Some(Token::Ident(s)) if s == "true" || s == "True" || s == "t" => Value::Bool(true),
                Some(Token::Ident(s)) if s == "false" || s == "False" || s == "f" => Value::Bool(false),
                Some(Token::Number(s)) if s == "1" => Value::Bool(true),
                Some(Token::Number(s)) if s == "0" => Value::Bool(false),
                _ => return Err(bad("true or false")),
            },
            Kind::Enum(e) => match &token {
                Some(Token::Ident(s)) => Value::EnumNumber(
                    e.get_value_by_name(s)
                        .ok_or_else(|| err(format!("field '{field}': '{s}' is not a value of {}", e.full_name())))?
                        .number(),
                ),
                Some(Token::Number(s)) => {
                    let n: i32 = s.parse().map_err(|_| bad("an enum value"))?;
                    if e.get_value(n).is_none() {
                        return Err(err(format!("field '{field}': {n} is not a value of {}", e.full_name())));
                    }
                    Value::EnumNumber(n)
                }
                _ => return Err(bad("an enum value")),
            },
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(
                parse_int(&token).and_then(|v| i32::try_from(v).ok()).ok_or_else(|| bad("a 32-bit integer"))?,
            ),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(
                parse_int(&token).and_then(|v| i64::try_from(v).ok()).ok_or_else(|| bad("a 64-bit integer"))?,
            ),
            Kind::Uint32 | Kind::Fixed32 => Value::U32(
                parse_int(&token)
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| bad("an unsigned 32-bit integer"))?,
            ),
            Kind::Uint64 | Kind::Fixed64 => Value::U64(
                parse_int(&token)
                    .and_then(|v| u64::try_from(v).ok())
                    .ok_or_else(|| bad("an unsigned 64-bit integer"))?,
            ),
            Kind::Float => Value::F32(parse_float(&token).ok_or_else(|| bad("a number"))? as f32),
            Kind::Double => Value::F64(parse_float(&token).ok_or_else(|| bad("a number"))?),
            Kind::Message(_) => unreachable!("messages are parsed by value_into"),
        })
    }
}

fn describe(token: Option<&Token>) -> String {
    match token {
        None => "the end of the file".into(),
        Some(Token::Ident(s)) => format!("'{s}'"),
        Some(Token::Number(s)) => format!("'{s}'"),
        Some(Token::Str(_)) => "a string".into(),
        Some(Token::Punct(c)) => format!("'{c}'"),
    }
}

fn parse_int(token: &Option<Token>) -> Option<i128> {
    let Some(Token::Number(s)) = token else {
        return None;
    };
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        i128::from_str_radix(hex, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        i128::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn parse_float(token: &Option<Token>) -> Option<f64> {
    match token {
        Some(Token::Number(s)) => {
            let s = s.trim_end_matches(['f', 'F']);
            s.parse::<f64>().ok().or_else(|| parse_int(&Some(Token::Number(s.to_string()))).map(|v| v as f64))
        }
        Some(Token::Ident(s)) => match s.to_ascii_lowercase().as_str() {
            "inf" | "infinity" => Some(f64::INFINITY),
            "nan" => Some(f64::NAN),
            _ => None,
        },
        _ => None,
    }
}

fn map_key(value: Value) -> Option<MapKey> {
    Some(match value {
        Value::Bool(b) => MapKey::Bool(b),
        Value::I32(v) => MapKey::I32(v),
        Value::I64(v) => MapKey::I64(v),
        Value::U32(v) => MapKey::U32(v),
        Value::U64(v) => MapKey::U64(v),
        Value::String(s) => MapKey::String(s),
        _ => return None,
    })
}

/// Parses `src` as a text-format message of type `desc`, with the line of each field path.
pub fn parse(src: &str, desc: MessageDescriptor) -> Result<(DynamicMessage, SourceLines), ParseError> {
    let tokens = tokenize(src)?;
    let end = {
        let lines = src.split('\n').count().max(1);
        let last = src.rsplit('\n').next().unwrap_or("");
        (lines, last.len() + 1)
    };
    let mut parser = Parser { tokens, pos: 0, end, path: Vec::new(), lines: SourceLines::default() };
    let mut msg = DynamicMessage::new(desc);
    parser.message_body(&mut msg, None, 0)?;
    Ok((msg, parser.lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::descriptor;

    fn parse_config(src: &str) -> Result<DynamicMessage, ParseError> {
        parse(src, descriptor()).map(|(m, _)| m)
    }

    #[test]
    fn records_field_lines() {
        let src = "name: \"m\"\ninput [\n  { name: \"a\" },\n  { name: \"b\"\n    dims: [ 1 ] }\n]\n";
        let (_, lines) = parse(src, descriptor()).unwrap();
        assert_eq!(lines.line_of("name"), Some(1));
        assert_eq!(lines.line_of("input[0]"), Some(3));
        assert_eq!(lines.line_of("input[1]"), Some(4));
        assert_eq!(lines.line_of("input[1].dims"), Some(5));
        assert_eq!(lines.line_of("input[1].data_type"), Some(4));
        assert_eq!(lines.line_of("output[0]"), None);
    }

    #[test]
    fn triton_forms_parse() {
        let src = r#"
            # a comment
            name: "simple"   # trailing comment
            backend: "add_sub"
            max_batch_size: 8
            input [
              { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
              { name: "INPUT1", data_type: TYPE_INT32, dims: [ -1 ] }
            ]
            output { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }
            instance_group [ { kind: KIND_CPU count: 2 } ]
            parameters { key: "mode" value: { string_value: "upper" } }
            parameters [ { key: "other" value: { string_value: "x" "y" } } ]
            dynamic_batching < max_queue_delay_microseconds: 100 >
        "#;
        let msg = parse_config(src).unwrap();
        let cfg: crate::config::ModelConfig = msg.transcode_to().unwrap();
        assert_eq!(cfg.name, "simple");
        assert_eq!(cfg.input.len(), 2);
        assert_eq!(cfg.input[1].dims, vec![-1]);
        assert_eq!(cfg.output[0].dims, vec![16]);
        assert_eq!(cfg.instance_group[0].count, 2);
        assert_eq!(cfg.parameters["mode"].string_value, "upper");
        assert_eq!(cfg.parameters["other"].string_value, "xy");
        assert!(cfg.scheduling_choice.is_some());
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse_config("name: \"a\"\n  bogus: 1\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
        assert!(e.message.contains("unknown field 'bogus'"), "{e}");

        let e = parse_config("input [ { name: \"x\" data_type: TYPE_NOPE } ]").unwrap_err();
        assert!(e.message.contains("TYPE_NOPE"), "{e}");

        let e = parse_config("max_batch_size: \"eight\"").unwrap_err();
        assert!(e.message.contains("max_batch_size"), "{e}");

        let e = parse_config("input [ { name: \"x\" ").unwrap_err();
        assert!(e.message.contains("end of the file"), "{e}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let src = "optimization ".to_string() + &"{ graph ".repeat(10_000);
        assert!(parse_config(&src).is_err());
    }
}
