//! `execute`'s requests as the host lowers them into the guest: WIT's `request` and `tensor` records
//! as the generated bindings have them (borrowing the request's own buffers), but with each tensor's
//! data copied into the guest's memory by [`crate::bulk_copy`], streamed past the caches when it is
//! megabytes, where wasmtime's lowering of a `list<u8>` is a `memcpy`. That copy is one of the two a
//! sandboxed model makes of every tensor (the other is `send-response`'s, `lift.rs`), and at 16–64
//! MiB it ran at about half the speed a streamed one does. The export is looked up and type-checked
//! against these records once, when the sandbox is built (`Sandbox::new`).
#![allow(unsafe_code)] // `Data` implements wasmtime's lowering traits by hand; each block says why.
use std::mem::MaybeUninit;

use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext};
use wasmtime::component::{ComponentType, Func, Lower, TypedFunc};
use wasmtime::{AsContext, AsContextMut, ValRaw};

use super::bindings::{CorrelationIdParam, DataType, ParameterParam, SequenceFlags};

/// The guest's `execute`, called with [`Request`]s.
#[derive(Clone, Copy)]
pub(super) struct Execute(Func);

/// `execute`'s parameters and result as the host passes and reads them.
type Signature<'a> = TypedFunc<(&'a [Request<'a>],), (Result<(), String>,)>;

impl Execute {
    /// The export `func` (the generated bindings' `execute`), checked once against [`Request`].
    pub fn new(func: Func, store: impl AsContext) -> wasmtime::Result<Self> {
        func.typed::<(&[Request<'_>],), (Result<(), String>,)>(&store)?;
        Ok(Execute(func))
    }

    /// Calls `execute` with `requests`: the guest's own result, or the trap or host error that
    /// ended the call.
    pub fn call(&self, store: impl AsContextMut, requests: &[Request<'_>]) -> wasmtime::Result<Result<(), String>> {
        // SAFETY: `new` type-checked the function against these very parameter and result types
        // (`Func::typed`), which is all `new_unchecked` leaves to its caller.
        let typed: Signature<'_> = unsafe { TypedFunc::new_unchecked(self.0) };
        let (returned,) = typed.call(store, (requests,))?;
        Ok(returned)
    }
}

/// WIT's `request`, lent to the guest for one `execute`.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct Request<'a> {
    #[component(name = "id")]
    pub id: &'a str,
    #[component(name = "correlation-id")]
    pub correlation_id: CorrelationIdParam<'a>,
    #[component(name = "flags")]
    pub flags: SequenceFlags,
    #[component(name = "parameters")]
    pub parameters: &'a [ParameterParam<'a>],
    #[component(name = "inputs")]
    pub inputs: &'a [Tensor<'a>],
    #[component(name = "requested-outputs")]
    pub requested_outputs: &'a [&'a str],
}

/// WIT's `tensor`, its data lowered by [`Data`].
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct Tensor<'a> {
    #[component(name = "name")]
    pub name: &'a str,
    #[component(name = "datatype")]
    pub datatype: DataType,
    #[component(name = "shape")]
    pub shape: &'a [i64],
    #[component(name = "data")]
    pub data: Data<'a>,
}

/// A tensor's bytes as a WIT `list<u8>`: allocated in the guest by its `cabi_realloc`, as for any
/// list, and filled by [`crate::bulk_copy::copy`] — from one buffer, or from the requests of a
/// merged batch one after the other (`merge.rs`), so that concatenating them costs no copy of its
/// own.
#[derive(Clone, Copy)]
pub(super) enum Data<'a> {
    One(&'a [u8]),
    Parts(&'a [bytes::Bytes]),
}

// SAFETY: the type information is `[u8]`'s, whose lowering `Data`'s reproduces (a pointer and a
// length, stored as wasmtime stores them) with only the copy of the bytes done differently.
unsafe impl ComponentType for Data<'_> {
    type Lower = <[u8] as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <[u8] as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u8] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: writes what `[u8]`'s lowering writes: the list's pointer and length as two i64 flat
// values, or as two little-endian u32s at `offset`, for bytes stored at that pointer.
unsafe impl Lower for Data<'_> {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        let ptr = self.store(cx)?;
        dst.write([ValRaw::i64(ptr as i64), ValRaw::i64(self.len() as i64)]);
        Ok(())
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        let ptr = u32::try_from(self.store(cx)?)?;
        let len = u32::try_from(self.len())?;
        *cx.get::<4>(offset) = ptr.to_le_bytes();
        *cx.get::<4>(offset + 4) = len.to_le_bytes();
        Ok(())
    }
}

impl Data<'_> {
    fn len(&self) -> usize {
        match self {
            Data::One(bytes) => bytes.len(),
            Data::Parts(parts) => parts.iter().map(|p| p.len()).sum(),
        }
    }

    /// Allocates the bytes in the guest and copies them there; the guest's address of the copy.
    fn store<T>(&self, cx: &mut LowerContext<'_, T>) -> wasmtime::Result<usize> {
        let len = self.len();
        let ptr = cx.realloc(0, 0, 1, len)?;
        let memory = cx.as_slice_mut();
        let target = ptr
            .checked_add(len)
            .and_then(|end| memory.get_mut(ptr..end))
            .ok_or_else(|| wasmtime::format_err!("list pointer/length out of bounds of memory"))?;
        match self {
            Data::One(bytes) => crate::bulk_copy::copy(target, bytes),
            Data::Parts(parts) => {
                let mut at = 0;
                for part in *parts {
                    crate::bulk_copy::copy(&mut target[at..at + part.len()], part);
                    at += part.len();
                }
            }
        }
        Ok(ptr)
    }
}
