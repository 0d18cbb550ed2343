//! Tensor views and builders over the WIT `tensor` record.
use std::borrow::Cow;

use crate::DataType;
use crate::bindings::nereus::backend::types::Tensor as RawTensor;

/// A Rust element type with a fixed Triton datatype, readable as a typed slice.
pub trait Element: bytemuck::Pod {
    /// The datatype a tensor of this element type carries.
    const DATATYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DATATYPE: DataType = DataType::$d; })* };
}
element!(u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64, i8 => Int8, i16 => Int16, i32 => Int32,
    i64 => Int64, f32 => Fp32, f64 => Fp64);

/// A tensor: a request input, or an output you build for a response.
#[derive(Clone, Debug)]
pub struct Tensor(pub(crate) RawTensor);

impl Tensor {
    /// A tensor from raw little-endian bytes (BOOL: one byte per element; BYTES: length-prefixed).
    pub fn from_raw(name: impl Into<String>, datatype: DataType, shape: Vec<i64>, data: Vec<u8>) -> Self {
        Tensor(RawTensor { name: name.into(), datatype, shape, data })
    }

    /// A tensor from typed elements, e.g. `Tensor::from_slice("OUTPUT0", vec![1, 16], &sums)`.
    pub fn from_slice<T: Element>(name: impl Into<String>, shape: Vec<i64>, values: &[T]) -> Self {
        Self::from_raw(name, T::DATATYPE, shape, bytemuck::cast_slice(values).to_vec())
    }

    /// A BOOL tensor.
    pub fn from_bools(name: impl Into<String>, shape: Vec<i64>, values: &[bool]) -> Self {
        Self::from_raw(name, DataType::Bool, shape, values.iter().map(|b| *b as u8).collect())
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn datatype(&self) -> DataType {
        self.0.datatype
    }

    pub fn shape(&self) -> &[i64] {
        &self.0.shape
    }

    /// The raw bytes, little-endian, row-major.
    pub fn data(&self) -> &[u8] {
        &self.0.data
    }

    /// Number of elements the shape describes.
    pub fn element_count(&self) -> usize {
        self.0.shape.iter().map(|d| (*d).max(0) as usize).product()
    }

    /// The elements as a typed slice; borrowed when the buffer is aligned (as it is in practice),
    /// copied otherwise. Fails when the tensor's datatype is not `T`'s.
    pub fn as_slice<T: Element>(&self) -> Result<Cow<'_, [T]>, String> {
        if self.0.datatype != T::DATATYPE {
            return Err(format!("tensor '{}' is {:?}, not {:?}", self.0.name, self.0.datatype, T::DATATYPE));
        }
        match bytemuck::try_cast_slice(&self.0.data) {
            Ok(slice) => Ok(Cow::Borrowed(slice)),
            Err(bytemuck::PodCastError::TargetAlignmentGreaterAndInputNotAligned) => {
                Ok(Cow::Owned(bytemuck::pod_collect_to_vec(&self.0.data)))
            }
            Err(e) => Err(format!("tensor '{}': {e:?}", self.0.name)),
        }
    }

    /// The elements of a BOOL tensor.
    pub fn as_bools(&self) -> Result<Vec<bool>, String> {
        if self.0.datatype != DataType::Bool {
            return Err(format!("tensor '{}' is {:?}, not Bool", self.0.name, self.0.datatype));
        }
        Ok(self.0.data.iter().map(|b| *b != 0).collect())
    }

    /// The elements of a BYTES tensor.
    pub fn bytes_elements(&self) -> Result<impl Iterator<Item = Result<&[u8], String>>, String> {
        if self.0.datatype != DataType::Bytes {
            return Err(format!("tensor '{}' is {:?}, not Bytes", self.0.name, self.0.datatype));
        }
        Ok(bytes_elements(&self.0.data))
    }

    /// The WIT record, for the host.
    pub fn into_raw(self) -> RawTensor {
        self.0
    }

    /// Renames the tensor (e.g. an input echoed as an output).
    pub fn renamed(mut self, name: impl Into<String>) -> Self {
        self.0.name = name.into();
        self
    }
}

/// Iterates over length-prefixed BYTES elements (4-byte little-endian length, then the bytes).
pub fn bytes_elements(mut data: &[u8]) -> impl Iterator<Item = Result<&[u8], String>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        if data.len() < 4 {
            data = &[];
            return Some(Err("truncated BYTES element length".to_string()));
        }
        let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
        let rest = &data[4..];
        if rest.len() < len {
            data = &[];
            return Some(Err("BYTES element longer than the tensor".to_string()));
        }
        let (element, tail) = rest.split_at(len);
        data = tail;
        Some(Ok(element))
    })
}

/// Builds a BYTES tensor element by element.
///
/// ```
/// use nereus_sdk::{BytesBuilder, DataType};
/// let mut b = BytesBuilder::new();
/// b.push(b"hello");
/// b.push("wörld");
/// let t = b.finish("OUT", vec![2]);
/// assert_eq!(t.datatype(), DataType::Bytes);
/// let elements: Vec<&[u8]> = t.bytes_elements().unwrap().map(Result::unwrap).collect();
/// assert_eq!(elements, vec![&b"hello"[..], "wörld".as_bytes()]);
/// ```
#[derive(Default)]
pub struct BytesBuilder {
    data: Vec<u8>,
    count: usize,
}

impl BytesBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one element.
    pub fn push(&mut self, element: impl AsRef<[u8]>) {
        let element = element.as_ref();
        self.data.extend_from_slice(&(element.len() as u32).to_le_bytes());
        self.data.extend_from_slice(element);
        self.count += 1;
    }

    /// Elements pushed so far.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The tensor, with the given shape (its element count should equal [`len`](Self::len)).
    pub fn finish(self, name: impl Into<String>, shape: Vec<i64>) -> Tensor {
        Tensor::from_raw(name, DataType::Bytes, shape, self.data)
    }
}

/// Builds output tensors; an alias kept for readability in response code.
pub type TensorBuilder = Tensor;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_slices_round_trip() {
        let t = Tensor::from_slice("X", vec![2, 2], &[1i32, -2, 3, i32::MAX]);
        assert_eq!(&*t.as_slice::<i32>().unwrap(), &[1, -2, 3, i32::MAX]);
        assert!(t.as_slice::<f32>().is_err());
        assert_eq!(t.element_count(), 4);
    }

    #[test]
    fn truncated_bytes_elements_are_errors() {
        let data = [5u8, 0, 0, 0, b'a'];
        let items: Vec<_> = bytes_elements(&data).collect();
        assert_eq!(items.len(), 1);
        assert!(items[0].is_err());
    }
}
