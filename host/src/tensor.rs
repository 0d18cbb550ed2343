//! Tensor datatypes, shapes and Triton's BYTES element encoding.
use std::fmt;
use std::str::FromStr;

use crate::config::schema;

/// A tensor element type. Wire names are the KServe v2 ones ("INT32", "BYTES", …); the model
/// configuration's `TYPE_*` names map onto the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
    Bf16,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
        DataType::Bf16,
    ];

    /// Bytes per element; `None` for BYTES, whose elements are length-prefixed.
    pub fn element_size(self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => 4,
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
            DataType::Bytes => return None,
        })
    }

    /// Whether a tensor of this type goes to a GPU byte for byte (not BYTES, whose elements are
    /// strings, nor BOOL, whose bytes are normalised to 0 or 1 on the host first).
    pub fn goes_to_device_as_is(self) -> bool {
        !matches!(self, DataType::Bool | DataType::Bytes)
    }

    /// The KServe v2 wire name.
    pub fn wire_name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
            DataType::Bf16 => "BF16",
        }
    }

    /// From the model configuration's enum; `None` for TYPE_INVALID or an unknown number.
    pub fn from_config(value: i32) -> Option<Self> {
        Some(match schema::DataType::try_from(value).ok()? {
            schema::DataType::TypeInvalid => return None,
            schema::DataType::TypeBool => DataType::Bool,
            schema::DataType::TypeUint8 => DataType::Uint8,
            schema::DataType::TypeUint16 => DataType::Uint16,
            schema::DataType::TypeUint32 => DataType::Uint32,
            schema::DataType::TypeUint64 => DataType::Uint64,
            schema::DataType::TypeInt8 => DataType::Int8,
            schema::DataType::TypeInt16 => DataType::Int16,
            schema::DataType::TypeInt32 => DataType::Int32,
            schema::DataType::TypeInt64 => DataType::Int64,
            schema::DataType::TypeFp16 => DataType::Fp16,
            schema::DataType::TypeFp32 => DataType::Fp32,
            schema::DataType::TypeFp64 => DataType::Fp64,
            schema::DataType::TypeString => DataType::Bytes,
            schema::DataType::TypeBf16 => DataType::Bf16,
        })
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl FromStr for DataType {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        DataType::ALL.iter().copied().find(|d| d.wire_name() == s).ok_or(())
    }
}

/// The number of elements a shape describes, or `None` when a dimension is negative or the product
/// overflows — checked before anything is allocated for it.
pub fn element_count(shape: &[i64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
}

/// Renders a shape as Triton does in messages: `[1,16]`.
pub fn shape_string(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", parts.join(","))
}

/// Splits a serialized BYTES tensor (4-byte little-endian length, then the bytes, per element)
/// into its elements; `Err` describes the first framing fault.
pub fn bytes_elements(mut data: &[u8]) -> impl Iterator<Item = Result<&[u8], &'static str>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let Some((len, rest)) = data.split_first_chunk::<4>() else {
            data = &[];
            return Some(Err("truncated BYTES element length"));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            data = &[];
            return Some(Err("BYTES element extends past the end of the tensor"));
        }
        let (element, tail) = rest.split_at(len);
        data = tail;
        Some(Ok(element))
    })
}

/// Counts the elements of a serialized BYTES tensor, checking the framing.
pub fn count_bytes_elements(data: &[u8]) -> Result<u64, &'static str> {
    let mut n = 0u64;
    for element in bytes_elements(data) {
        element?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(d.wire_name().parse::<DataType>(), Ok(d));
        }
        assert!("TYPE_INT32".parse::<DataType>().is_err());
    }

    #[test]
    fn element_count_rejects_negative_and_overflow() {
        assert_eq!(element_count(&[2, 3]), Some(6));
        assert_eq!(element_count(&[]), Some(1));
        assert_eq!(element_count(&[-1, 3]), None);
        assert_eq!(element_count(&[1 << 40, 1 << 40]), None);
    }

    #[test]
    fn bytes_framing() {
        let data = [2, 0, 0, 0, b'h', b'i', 0, 0, 0, 0];
        assert_eq!(count_bytes_elements(&data), Ok(2));
        assert!(count_bytes_elements(&[9, 0, 0, 0, 1]).is_err());
        assert!(count_bytes_elements(&[1, 0]).is_err());
    }
}
