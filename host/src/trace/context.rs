//! W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
//! headers a caller sends so that the server's spans join its trace, parsed as the specification
//! says a receiver must, and the ids of new traces and spans.
//!
//! A `traceparent` is `version-traceid-parentid-flags` in lowercase hex. Version `00` is exactly 55
//! characters; a later version may carry more after a `-`, which a version-00 receiver ignores;
//! version `ff`, an all-zero trace or parent id, uppercase hex or a wrong length make the header
//! invalid, and an invalid header is ignored (the request starts a trace of its own, as an
//! OpenTelemetry propagator does). A `tracestate` travels with the trace only when it is valid.
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// A 16-byte trace id.
pub type TraceId = [u8; 16];
/// An 8-byte span id.
pub type SpanId = [u8; 8];

/// The `sampled` bit of the trace flags.
pub const SAMPLED: u8 = 0x01;

/// Where a request's trace context is read from: its HTTP headers or gRPC metadata.
pub trait Carrier {
    /// Every value of the (lowercase) header `key`, in order.
    fn values(&self, key: &str) -> Vec<&str>;

    /// Every header as (lowercase) name and value, in order; a value that is not UTF-8 is read
    /// lossily (the header forward pattern, `crate::api::headers`, passes them on as strings).
    fn pairs(&self) -> Vec<(String, String)>;
}

/// Headers kept as name and value pairs (a gRPC stream's, for each of its requests).
impl Carrier for Vec<(String, String)> {
    fn values(&self, key: &str) -> Vec<&str> {
        self.iter().filter(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str()).collect()
    }

    fn pairs(&self) -> Vec<(String, String)> {
        self.clone()
    }
}

/// The caller's span, as its `traceparent` (and `tracestate`) header describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub flags: u8,
    /// The validated `tracestate`, or empty.
    pub trace_state: String,
}

impl SpanContext {
    /// Parses the caller's headers; `None` when `traceparent` is missing or invalid. `tracestate`
    /// is kept only when valid (an invalid one is dropped, the parent still counts).
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<SpanContext> {
        let (trace_id, span_id, flags) = parse_traceparent(traceparent?)?;
        let trace_state = tracestate.filter(|s| valid_tracestate(s)).map(normalise_tracestate).unwrap_or_default();
        Some(SpanContext { trace_id, span_id, flags, trace_state })
    }

    /// Reads the caller's span from a request's headers: one `traceparent` (a missing or repeated
    /// one is ignored), and the `tracestate` headers joined.
    pub fn extract(carrier: &dyn Carrier) -> Option<SpanContext> {
        let parents = carrier.values("traceparent");
        let [parent] = parents.as_slice() else { return None };
        let states = carrier.values("tracestate");
        let state = (!states.is_empty()).then(|| states.join(","));
        SpanContext::from_headers(Some(parent), state.as_deref())
    }

    /// Whether the caller recorded its span (and wants its children recorded).
    pub fn is_sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }
}

/// The `traceparent` of a span: version 00, lowercase hex.
pub fn format_traceparent(trace_id: &TraceId, span_id: &SpanId, flags: u8) -> String {
    format!("00-{}-{}-{flags:02x}", hex(trace_id), hex(span_id))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Decodes lowercase hex into `out`; `None` on any other character.
fn unhex(text: &str, out: &mut [u8]) -> Option<()> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if bytes.len() != out.len() * 2 {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(bytes[2 * i])? << 4 | digit(bytes[2 * i + 1])?;
    }
    Some(())
}

/// Parses a `traceparent` value (surrounding spaces and tabs allowed, as HTTP's optional
/// whitespace): the trace id, the parent span id and the flags.
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, u8)> {
    let value = value.trim_matches([' ', '\t']);
    let mut version = [0u8; 1];
    unhex(value.get(..2)?, &mut version)?;
    match version[0] {
        0xff => return None,
        // Version 00 is exactly 55 characters.
        0x00 if value.len() != 55 => return None,
        // A later version starts with version 00's fields; whatever follows them is its own.
        _ if value.len() < 55 || (value.len() > 55 && value.as_bytes()[55] != b'-') => return None,
        _ => {}
    }
    let bytes = value.as_bytes();
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let (mut trace_id, mut span_id, mut flags) = ([0u8; 16], [0u8; 8], [0u8; 1]);
    unhex(value.get(3..35)?, &mut trace_id)?;
    unhex(value.get(36..52)?, &mut span_id)?;
    unhex(value.get(53..55)?, &mut flags)?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some((trace_id, span_id, flags[0]))
}

/// Whether a `tracestate` value is valid: at most 32 comma-separated `key=value` members (empty
/// ones allowed), keys unique and of the allowed shape (`vendor` or `tenant@vendor`), values of
/// printable ASCII without `,` and `=` and not ending in a space.
fn valid_tracestate(value: &str) -> bool {
    let mut keys: Vec<&str> = Vec::new();
    for member in value.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let Some((key, val)) = member.split_once('=') else { return false };
        if !valid_key(key) || !valid_value(val) || keys.contains(&key) {
            return false;
        }
        keys.push(key);
    }
    keys.len() <= 32
}

fn valid_key(key: &str) -> bool {
    let simple = |s: &str, max: usize, first: fn(u8) -> bool| {
        let b = s.as_bytes();
        !b.is_empty()
            && b.len() <= max
            && first(b[0])
            && b[1..].iter().all(|&c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/'))
    };
    let lower_or_digit = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match key.split_once('@') {
        None => simple(key, 256, lower_or_digit),
        Some((tenant, vendor)) => simple(tenant, 241, lower_or_digit) && simple(vendor, 14, |c| c.is_ascii_lowercase()),
    }
}

fn valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    b.len() <= 256 && b.last() != Some(&b' ') && b.iter().all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

/// A valid `tracestate` as it is passed on: members trimmed, empty ones left out.
fn normalise_tracestate(value: &str) -> String {
    value.split(',').map(|m| m.trim_matches([' ', '\t'])).filter(|m| !m.is_empty()).collect::<Vec<_>>().join(",")
}

/// Random trace and span ids: a SplitMix64 sequence from a seed the standard library draws from the
/// operating system. Not for secrets; ids only need to be unique and spread out.
#[derive(Debug)]
pub struct IdGenerator {
    next: AtomicU64,
}

impl Default for IdGenerator {
    fn default() -> Self {
        // `RandomState` keys come from the operating system's random source.
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        IdGenerator { next: AtomicU64::new(seed) }
    }
}

impl IdGenerator {
    fn next_u64(&self) -> u64 {
        let mut z = self.next.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A new trace id (never all zeros).
    pub fn trace_id(&self) -> TraceId {
        loop {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&self.next_u64().to_be_bytes());
            id[8..].copy_from_slice(&self.next_u64().to_be_bytes());
            if id != [0; 16] {
                return id;
            }
        }
    }

    /// A new span id (never all zeros).
    pub fn span_id(&self) -> SpanId {
        loop {
            let id = self.next_u64().to_be_bytes();
            if id != [0; 8] {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "0af7651916cd43dd8448eb211c12666c";
    const SPAN: &str = "b7ad6b7169242424";

    fn parse(value: &str) -> Option<SpanContext> {
        SpanContext::from_headers(Some(value), None)
    }

    #[test]
    fn a_valid_traceparent_gives_the_callers_ids_and_flags() {
        let c = parse(&format!("00-{TRACE}-{SPAN}-01")).unwrap();
        assert_eq!(hex(&c.trace_id), TRACE);
        assert_eq!(hex(&c.span_id), SPAN);
        assert!(c.is_sampled());
        let c = parse(&format!(" \t00-{TRACE}-{SPAN}-00 ")).unwrap();
        assert!(!c.is_sampled());
        assert_eq!(format_traceparent(&c.trace_id, &c.span_id, c.flags), format!("00-{TRACE}-{SPAN}-00"));
        // Flags other than `sampled` are kept as they are.
        assert_eq!(parse(&format!("00-{TRACE}-{SPAN}-09")).unwrap().flags, 0x09);
    }

    #[test]
    fn invalid_traceparents_are_ignored() {
        for bad in [
            String::new(),
            "garbage".into(),
            format!("00-{TRACE}-{SPAN}"),
            format!("00-{TRACE}-{SPAN}-01-"),
            format!("00-{TRACE}-{SPAN}-01-extra"),
            format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
            format!("00-{TRACE}-{}-01", SPAN.to_uppercase()),
            format!("0A-{TRACE}-{SPAN}-01"),
            format!("00-{}-{SPAN}-01", "0".repeat(32)),
            format!("00-{TRACE}-{}-01", "0".repeat(16)),
            format!("00-{}-{SPAN}-01", &TRACE[1..]),
            format!("00_{TRACE}_{SPAN}_01"),
            format!("00-{TRACE}-{SPAN}-0g"),
            format!("00-{TRACE}-{SPAN}-1"),
            format!("00-{}x-{SPAN}-01", &TRACE[1..]),
        ] {
            assert_eq!(parse(&bad), None, "{bad:?}");
        }
        assert_eq!(SpanContext::from_headers(None, Some("a=b")), None);
    }

    #[test]
    fn a_repeated_traceparent_is_ignored_and_tracestates_are_joined() {
        let headers = |h: &[(&str, &str)]| -> Vec<(String, String)> {
            h.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let parent = format!("00-{TRACE}-{SPAN}-01");
        let both = headers(&[("traceparent", &parent), ("TraceState", "a=1"), ("tracestate", "b=2")]);
        assert_eq!(SpanContext::extract(&both).unwrap().trace_state, "a=1,b=2");
        assert_eq!(SpanContext::extract(&headers(&[("traceparent", &parent), ("traceparent", &parent)])), None);
        assert_eq!(SpanContext::extract(&headers(&[])), None);
    }

    #[test]
    fn version_ff_is_invalid_and_later_versions_are_read_as_version_00() {
        assert_eq!(parse(&format!("ff-{TRACE}-{SPAN}-01")), None);
        // A future version: its extra fields after a dash are ignored…
        let c = parse(&format!("cc-{TRACE}-{SPAN}-01-what-the-future-holds")).unwrap();
        assert_eq!(hex(&c.trace_id), TRACE);
        assert_eq!(parse(&format!("01-{TRACE}-{SPAN}-01")).map(|c| c.flags), Some(1));
        // …but its first fields follow version 00's rules.
        assert_eq!(parse(&format!("cc-{TRACE}-{SPAN}-01x")), None);
        assert_eq!(parse(&format!("cc-{TRACE}-{SPAN}-0")), None);
    }

    #[test]
    fn tracestate_is_kept_only_when_valid() {
        let parent = format!("00-{TRACE}-{SPAN}-01");
        let state = |s: &str| SpanContext::from_headers(Some(&parent), Some(s)).unwrap().trace_state;
        assert_eq!(state("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"), "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
        assert_eq!(state("tenant@vendor=v, ,x=1"), "tenant@vendor=v,x=1");
        for bad in ["no-equals", "Upper=1", "a=1,a=2", "a=b,c", "k=v\u{7f}", "k=a=b", "@v=1", "t@V=1"] {
            assert_eq!(state(bad), "", "{bad:?}");
        }
        let too_many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(state(&too_many.join(",")), "");
    }

    #[test]
    fn generated_ids_are_never_zero_and_do_not_repeat() {
        let ids = IdGenerator::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            assert!(seen.insert(ids.span_id()));
            assert_ne!(ids.trace_id(), [0; 16]);
        }
    }
}
