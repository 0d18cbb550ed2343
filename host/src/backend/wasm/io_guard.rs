//! WASI's I/O interfaces (`wasi:io/poll`, `wasi:io/streams`) as a sandbox sees them: wasmtime-wasi's
//! own, except where one would block while the sandbox may not. In this synchronous embedding every
//! `poll`, every wait on a pollable and every blocking stream operation (a print ends in one) enters
//! the tokio runtime to block on it, which on one of the runtime's own threads — an inline execution
//! on an I/O thread — cannot be done. There the call traps with a typed [`WouldBlock`] instead, and
//! the scheduler runs the request again on the instance's own worker, where blocking is allowed.
use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamError, StreamResult};

/// The trap of a WASI call that would block where the sandbox may not.
#[derive(Debug)]
pub struct WouldBlock;

impl std::fmt::Display for WouldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a blocking WASI call (a wait, a print) during an inline execution")
    }
}

impl std::error::Error for WouldBlock {}

/// The sandbox's resource table, and whether its calls may block now.
pub struct IoGuard<'a> {
    pub table: &'a mut ResourceTable,
    pub may_block: bool,
}

/// The [`HasData`] under which the guarded interfaces are linked.
pub struct GuardedIo;

impl HasData for GuardedIo {
    type Data<'a> = IoGuard<'a>;
}

impl IoGuard<'_> {
    fn allowed(&self) -> wasmtime::Result<()> {
        if self.may_block { Ok(()) } else { Err(wasmtime::Error::new(WouldBlock)) }
    }

    fn stream_allowed(&self) -> StreamResult<()> {
        self.allowed().map_err(StreamError::Trap)
    }
}

impl poll::Host for IoGuard<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        self.allowed()?;
        poll::Host::poll(self.table, pollables)
    }
}

impl poll::HostPollable for IoGuard<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        self.allowed()?;
        poll::HostPollable::ready(self.table, pollable)
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        self.allowed()?;
        poll::HostPollable::block(self.table, pollable)
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        poll::HostPollable::drop(self.table, pollable)
    }
}

impl streams::Host for IoGuard<'_> {
    fn convert_stream_error(&mut self, err: StreamError) -> wasmtime::Result<streams::StreamError> {
        streams::Host::convert_stream_error(self.table, err)
    }
}

impl streams::HostOutputStream for IoGuard<'_> {
    fn drop(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<()> {
        // Dropping a stream flushes it, blocking.
        self.allowed()?;
        streams::HostOutputStream::drop(self.table, stream)
    }

    fn check_write(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<u64> {
        streams::HostOutputStream::check_write(self.table, stream)
    }

    fn write(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        streams::HostOutputStream::write(self.table, stream, bytes)
    }

    fn blocking_write_and_flush(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        self.stream_allowed()?;
        streams::HostOutputStream::blocking_write_and_flush(self.table, stream, bytes)
    }

    fn blocking_write_zeroes_and_flush(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        self.stream_allowed()?;
        streams::HostOutputStream::blocking_write_zeroes_and_flush(self.table, stream, len)
    }

    fn subscribe(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostOutputStream::subscribe(self.table, stream)
    }

    fn write_zeroes(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        streams::HostOutputStream::write_zeroes(self.table, stream, len)
    }

    fn flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        streams::HostOutputStream::flush(self.table, stream)
    }

    fn blocking_flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        self.stream_allowed()?;
        streams::HostOutputStream::blocking_flush(self.table, stream)
    }

    fn splice(&mut self, dst: Resource<DynOutputStream>, src: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        streams::HostOutputStream::splice(self.table, dst, src, len)
    }

    fn blocking_splice(
        &mut self,
        dst: Resource<DynOutputStream>,
        src: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        self.stream_allowed()?;
        streams::HostOutputStream::blocking_splice(self.table, dst, src, len)
    }
}

impl streams::HostInputStream for IoGuard<'_> {
    fn drop(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<()> {
        self.allowed()?;
        streams::HostInputStream::drop(self.table, stream)
    }

    fn read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        streams::HostInputStream::read(self.table, stream, len)
    }

    fn blocking_read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        self.stream_allowed()?;
        streams::HostInputStream::blocking_read(self.table, stream, len)
    }

    fn skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        streams::HostInputStream::skip(self.table, stream, len)
    }

    fn blocking_skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        self.stream_allowed()?;
        streams::HostInputStream::blocking_skip(self.table, stream, len)
    }

    fn subscribe(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostInputStream::subscribe(self.table, stream)
    }
}
