//! tritonserver's response cache (`--cache-config local,size=N`, a model's
//! `response_cache { enable: true }`): a model's final response kept under a digest of what decided
//! it, so that the same request again is answered without executing.
//!
//! One cache for the server, bounded in bytes, least recently used first out. tritonserver's key is
//! a 64-bit `boost::hash_combine` of the model's name and version and each input's name and bytes:
//! two requests whose inputs differ only in shape or datatype share a key, and any collision
//! answers one client with another's response. Here the key is a SHA-256 of everything the
//! response depends on (the model and version, every input's name, datatype, shape and bytes, the
//! outputs asked for, the request's parameters), each field length-prefixed, so that a collision
//! is out of a client's reach. A hit shares the stored bytes (nothing is copied); an entry is a
//! copy of the response's outputs, so that it holds no request body or backend buffer alive beyond
//! what it counts.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::request::{InferenceRequest, InferenceResponse, ParamValue, Tensor};

/// What an entry costs beside its tensors' bytes, names and shapes (its key, its shared
/// allocation, its place in the map and in the recency list), and what each tensor and parameter
/// costs beside its own bytes (its struct, its allocations' headers and rounding, the shared
/// header of its bytes); measured from the types' sizes, rounded up.
const ENTRY_OVERHEAD: u64 = 256;
const ITEM_OVERHEAD: u64 = 160;

/// The response cache's settings from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// The most bytes the entries may take together.
    pub size: u64,
}

impl CacheSettings {
    /// Reads tritonserver's flags: `--cache-config <cache>,<setting>=<value>` (repeatable) and the
    /// deprecated `--response-cache-byte-size N` (a `local` cache of N bytes; 0 means none). Returns
    /// the settings (`None`: no cache) and the warnings to print; an error in tritonserver's words.
    pub fn from_flags(config: &[String], byte_size: Option<u64>) -> Result<(Option<Self>, Vec<String>), String> {
        let mut warnings = Vec::new();
        if byte_size.is_some() && !config.is_empty() {
            return Err("Error: Incompatible flags --response-cache-byte-size and --cache-config both provided. \
                        Please provide one or the other."
                .into());
        }
        if let Some(size) = byte_size {
            warnings.push(format!(
                "Warning: '--response-cache-byte-size' has been deprecated! This will default to the 'local' cache \
                 implementation with the provided byte size for its config. Please use '--cache-config' instead. The \
                 equivalent --cache-config CLI args would be: '--cache-config=local,size={size}'"
            ));
            return Ok(((size > 0).then_some(CacheSettings { size }), warnings));
        }
        let mut caches: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
        for arg in config {
            let (name, setting) = parse_setting(arg)?;
            caches.entry(name).or_default().push(setting);
        }
        if caches.len() > 1 {
            return Err("found multiple cache configurations, but only a single cache is currently supported".into());
        }
        let Some((name, settings)) = caches.into_iter().next() else { return Ok((None, warnings)) };
        if name != "local" {
            return Err(format!(
                "cache '{name}' is not available: Nereus has the 'local' cache only (--cache-config local,size=N)"
            ));
        }
        let mut size = None;
        for (key, value) in settings {
            match key {
                "size" => {
                    size = Some(value.parse::<u64>().map_err(|_| {
                        format!("--cache-config local,size={value}: the size must be a number of bytes")
                    })?)
                }
                other => warnings.push(format!("Warning: the local cache has no setting '{other}'; ignored")),
            }
        }
        let size = size.ok_or("--cache-config local: the local cache needs its size (local,size=<bytes>)")?;
        Ok((Some(CacheSettings { size }), warnings))
    }
}

/// `<cache>,<setting>=<value>` as tritonserver's `ParseCacheConfigOption` reads it.
fn parse_setting(arg: &str) -> Result<(&str, (&str, &str)), String> {
    let Some((name, rest)) = arg.split_once(',').filter(|(name, _)| !name.is_empty()) else {
        return Err(format!(
            "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got {arg}"
        ));
    };
    match rest.split_once('=') {
        Some((key, value)) if !key.is_empty() && !value.is_empty() => Ok((name, (key, value))),
        _ => Err(format!("--cache-config option format is '<cache name>,<setting>=<value>'. Got {arg}")),
    }
}

/// A request's key: the SHA-256 of what its response depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0[..8].iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl CacheKey {
    /// The key of `request` to `owner`, a load of version `version` of `model` (see
    /// [`ResponseCache::owner`]); `None` when an input is still in a client's GPU memory (only host
    /// bytes are hashed, as in tritonserver, which then caches nothing for the request).
    pub fn of(owner: Owner, model: &str, version: i64, request: &InferenceRequest) -> Option<CacheKey> {
        if !request.device_inputs.is_empty() {
            return None;
        }
        let mut h = Sha256::new();
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(&owner.0.to_le_bytes());
        field(model.as_bytes());
        field(&version.to_le_bytes());
        let mut inputs: Vec<&Tensor> = request.inputs.iter().collect();
        inputs.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        field(&(inputs.len() as u64).to_le_bytes());
        for t in inputs {
            field(t.name.as_bytes());
            field(t.datatype.wire_name().as_bytes());
            field(&(t.shape.len() as u64).to_le_bytes());
            for d in &t.shape {
                field(&d.to_le_bytes());
            }
            field(&t.data);
        }
        let mut outputs: Vec<&str> = request.requested_outputs.iter().map(String::as_str).collect();
        outputs.sort_unstable();
        field(&(outputs.len() as u64).to_le_bytes());
        for name in outputs {
            field(name.as_bytes());
        }
        let mut parameters: Vec<&(String, ParamValue)> = request.parameters.iter().collect();
        parameters.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        field(&(parameters.len() as u64).to_le_bytes());
        for (key, value) in parameters {
            field(key.as_bytes());
            // The value's kind, then its bytes: a field each, so nothing is joined to hash it.
            match value {
                ParamValue::Bool(b) => field(&[0, u8::from(*b)]),
                ParamValue::Int64(v) => {
                    field(&[1]);
                    field(&v.to_le_bytes());
                }
                ParamValue::Uint64(v) => {
                    field(&[2]);
                    field(&v.to_le_bytes());
                }
                ParamValue::Double(v) => {
                    field(&[3]);
                    field(&v.to_bits().to_le_bytes());
                }
                ParamValue::String(s) => {
                    field(&[4]);
                    field(s.as_bytes());
                }
            }
        }
        Some(CacheKey(h.finalize().into()))
    }
}

/// A cached response: what a hit answers with (the model, version and request id are the
/// request's own).
#[derive(Debug)]
pub struct CachedResponse {
    pub parameters: Vec<(String, ParamValue)>,
    pub outputs: Vec<Tensor>,
    bytes: u64,
}

impl CachedResponse {
    /// A copy of `response`'s parameters and outputs; `None` when an output was written straight
    /// into a client's shared memory (the response has no bytes of it to keep).
    fn of(response: &InferenceResponse) -> Option<Self> {
        if !response.in_place.is_empty() {
            return None;
        }
        let outputs: Vec<Tensor> = response
            .outputs
            .iter()
            .map(|t| Tensor { data: bytes::Bytes::copy_from_slice(&t.data), ..t.clone() })
            .collect();
        let tensors: u64 = outputs
            .iter()
            .map(|t| ITEM_OVERHEAD + t.name.len() as u64 + 8 * t.shape.len() as u64 + t.data.len() as u64)
            .sum();
        let parameters: u64 = response
            .parameters
            .iter()
            .map(|(k, v)| {
                ITEM_OVERHEAD + k.len() as u64 + if let ParamValue::String(s) = v { s.len() as u64 } else { 8 }
            })
            .sum();
        Some(CachedResponse {
            parameters: response.parameters.clone(),
            outputs,
            bytes: ENTRY_OVERHEAD + tensors + parameters,
        })
    }

    /// What the entry counts against the cache's size.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Why a response was not kept.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InsertError {
    /// Another request with the same key got there first (not a miss of this one, in
    /// tritonserver's counting).
    #[error("key already exists")]
    AlreadyExists,
    #[error("the entry's {bytes} bytes exceed the cache's size of {size} bytes")]
    TooLarge { bytes: u64, size: u64 },
    #[error("an output was written straight into the client's shared memory")]
    WrittenInPlace,
}

struct Slot {
    entry: Arc<CachedResponse>,
    /// Its place in `Store::recency`.
    used: u64,
}

#[derive(Default)]
struct Store {
    entries: HashMap<CacheKey, Slot>,
    /// Keys by last use, oldest first.
    recency: BTreeMap<u64, CacheKey>,
    clock: u64,
    bytes: u64,
}

impl Store {
    fn touch(&mut self, key: CacheKey) -> Option<Arc<CachedResponse>> {
        self.clock += 1;
        let clock = self.clock;
        let slot = self.entries.get_mut(&key)?;
        self.recency.remove(&slot.used);
        slot.used = clock;
        self.recency.insert(clock, key);
        Some(slot.entry.clone())
    }
}

/// One load of a model version, as the cache tells loads apart: a reload of the same version
/// (another plugin, another configuration) may answer differently, so it never sees the entries of
/// the load before it, which age out as the cache fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner(u64);

/// The server's response cache.
pub struct ResponseCache {
    size: u64,
    store: Mutex<Store>,
    loads: std::sync::atomic::AtomicU64,
}

impl ResponseCache {
    pub fn new(settings: &CacheSettings) -> Self {
        ResponseCache { size: settings.size, store: Mutex::new(Store::default()), loads: Default::default() }
    }

    /// A new load's place in the cache: its keys are apart from every other load's.
    pub fn owner(&self) -> Owner {
        Owner(self.loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The response kept under `key`, now the most recently used.
    pub fn lookup(&self, key: CacheKey) -> Option<Arc<CachedResponse>> {
        self.store.lock().touch(key)
    }

    /// Keeps a copy of `response` under `key`, evicting the least recently used entries to make
    /// room; the copy is made outside the lock.
    pub fn insert(&self, key: CacheKey, response: &InferenceResponse) -> Result<(), InsertError> {
        if self.store.lock().entries.contains_key(&key) {
            return Err(InsertError::AlreadyExists);
        }
        let entry = CachedResponse::of(response).ok_or(InsertError::WrittenInPlace)?;
        if entry.bytes > self.size {
            return Err(InsertError::TooLarge { bytes: entry.bytes, size: self.size });
        }
        let mut store = self.store.lock();
        if store.entries.contains_key(&key) {
            return Err(InsertError::AlreadyExists);
        }
        while store.bytes + entry.bytes > self.size {
            let Some((_, oldest)) = store.recency.pop_first() else { break };
            if let Some(slot) = store.entries.remove(&oldest) {
                store.bytes -= slot.entry.bytes;
            }
        }
        store.clock += 1;
        let used = store.clock;
        store.bytes += entry.bytes;
        store.recency.insert(used, key);
        store.entries.insert(key, Slot { entry: Arc::new(entry), used });
        Ok(())
    }

    /// How many entries and bytes the cache holds.
    pub fn usage(&self) -> (usize, u64) {
        let store = self.store.lock();
        (store.entries.len(), store.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DataType;

    fn tensor(name: &str, shape: &[i64], data: &[u8]) -> Tensor {
        Tensor { name: name.into(), datatype: DataType::Int32, shape: shape.to_vec(), data: data.to_vec().into() }
    }

    fn request(inputs: Vec<Tensor>) -> InferenceRequest {
        InferenceRequest { model_name: "m".into(), inputs, ..Default::default() }
    }

    fn response(bytes: usize) -> InferenceResponse {
        InferenceResponse {
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            parameters: Vec::new(),
            outputs: vec![tensor("OUT", &[bytes as i64 / 4], &vec![7; bytes])],
            in_place: Vec::new(),
            spent: Default::default(),
        }
    }

    #[test]
    fn the_key_covers_shape_datatype_order_outputs_and_parameters() {
        let a = request(vec![tensor("A", &[2], &[1; 8]), tensor("B", &[2], &[2; 8])]);
        let owner = Owner(0);
        let key = |r: &InferenceRequest| CacheKey::of(owner, "m", 1, r).unwrap();
        let mut reordered = a.clone();
        reordered.inputs.reverse();
        assert_eq!(key(&a), key(&reordered), "inputs are keyed by name, not order");
        let mut reshaped = a.clone();
        reshaped.inputs[0].shape = vec![1, 2];
        assert_ne!(key(&a), key(&reshaped), "tritonserver's key would collide here");
        let mut retyped = a.clone();
        retyped.inputs[0].datatype = DataType::Fp32;
        assert_ne!(key(&a), key(&retyped));
        let mut asked = a.clone();
        asked.requested_outputs = vec!["OUT".into()];
        assert_ne!(key(&a), key(&asked));
        let mut parameterised = a.clone();
        parameterised.parameters = vec![("k".into(), ParamValue::Int64(1))];
        assert_ne!(key(&a), key(&parameterised));
        assert_ne!(key(&a), CacheKey::of(owner, "m", 2, &a).unwrap(), "versions are apart");
        assert_ne!(key(&a), CacheKey::of(owner, "n", 1, &a).unwrap(), "models are apart");
        assert_ne!(key(&a), CacheKey::of(Owner(1), "m", 1, &a).unwrap(), "loads are apart");
        // Moving a byte from one field to the next changes the key (fields are length-prefixed).
        let split = request(vec![tensor("AB", &[2], &[1; 8])]);
        let moved = request(vec![tensor("A", &[2], &[b'B', 1, 1, 1, 1, 1, 1, 1, 1])]);
        assert_ne!(key(&split), key(&moved));
    }

    #[test]
    fn least_recently_used_entries_leave_first() {
        let one = response(64).outputs[0].data.len() as u64;
        let entry_bytes = CachedResponse::of(&response(64)).unwrap().bytes();
        assert!(entry_bytes > one);
        let cache = ResponseCache::new(&CacheSettings { size: 2 * entry_bytes });
        let keys: Vec<CacheKey> = (0..3u8)
            .map(|i| CacheKey::of(Owner(0), "m", 1, &request(vec![tensor("A", &[1], &[i; 4])])).unwrap())
            .collect();
        cache.insert(keys[0], &response(64)).unwrap();
        cache.insert(keys[1], &response(64)).unwrap();
        assert_eq!(cache.insert(keys[1], &response(64)), Err(InsertError::AlreadyExists));
        assert!(cache.lookup(keys[0]).is_some(), "0 is now more recent than 1");
        cache.insert(keys[2], &response(64)).unwrap();
        assert!(cache.lookup(keys[1]).is_none(), "1 was the least recently used");
        assert!(cache.lookup(keys[0]).is_some() && cache.lookup(keys[2]).is_some());
        assert_eq!(cache.usage(), (2, 2 * entry_bytes));
        let big = response(1 << 20);
        assert!(matches!(cache.insert(keys[1], &big), Err(InsertError::TooLarge { .. })));
        assert_eq!(cache.usage(), (2, 2 * entry_bytes), "a refused entry evicts nothing");
        let mut written = response(64);
        written.in_place = vec!["OUT".into()];
        assert_eq!(cache.insert(keys[1], &written), Err(InsertError::WrittenInPlace));
    }

    #[test]
    fn the_overheads_cover_what_an_entry_holds() {
        use std::mem::size_of;
        // A tensor: its struct, two allocations' headers and rounding, the shared header of its
        // bytes once a hit clones them.
        assert!(ITEM_OVERHEAD as usize >= size_of::<Tensor>() + 2 * 16 + 32);
        assert!(ITEM_OVERHEAD as usize >= size_of::<(String, ParamValue)>() + 16);
        // An entry: its shared allocation, its map slot and its recency entry (with slack for
        // the tables' spare room).
        let held = size_of::<CachedResponse>() + 16 + size_of::<(CacheKey, Slot)>() + size_of::<(u64, CacheKey)>();
        assert!(ENTRY_OVERHEAD as usize >= held, "{held}");
    }

    #[test]
    fn flags_as_tritonserver_reads_them() {
        let flags = |config: &[&str], size: Option<u64>| {
            CacheSettings::from_flags(&config.iter().map(|s| s.to_string()).collect::<Vec<_>>(), size)
        };
        assert_eq!(flags(&[], None).unwrap().0, None);
        assert_eq!(flags(&["local,size=8192"], None).unwrap().0, Some(CacheSettings { size: 8192 }));
        let (settings, warnings) = flags(&[], Some(8192)).unwrap();
        assert_eq!(settings, Some(CacheSettings { size: 8192 }));
        assert!(warnings[0].contains("'--cache-config=local,size=8192'"), "{warnings:?}");
        assert_eq!(flags(&[], Some(0)).unwrap().0, None, "a size of zero is no cache");
        assert!(flags(&["local,size=1"], Some(1)).unwrap_err().contains("Incompatible flags"));
        assert!(
            flags(&["local,size=1", "redis,key=value"], None).unwrap_err().contains("multiple cache configurations")
        );
        assert!(flags(&["redis,host=localhost"], None).unwrap_err().contains("'local' cache only"));
        assert!(flags(&["size=1"], None).unwrap_err().starts_with("No cache specified"));
        assert!(flags(&["local,size"], None).unwrap_err().contains("format is"));
        assert!(flags(&["local,size=lots"], None).is_err());
        assert!(flags(&["local,other=1"], None).is_err(), "no size");
    }
}
