//! WASI's I/O interfaces (`wasi:io/poll`, `wasi:io/streams`) as a sandbox sees them: wasmtime-wasi's
//! own, except where one would block. In this synchronous embedding every `poll`, every wait on a
//! pollable and every blocking stream operation (a print ends in one) enters the tokio runtime to
//! block on it; here each such wait is bounded:
//!
//! - **Not at all inline.** On one of the runtime's own threads — an inline execution on an I/O
//!   thread — it cannot be done: the call traps with a typed [`WouldBlock`], and the scheduler runs
//!   the request again on the instance's own worker, where blocking is allowed.
//! - **By the call's deadline.** Epoch interruption stops a guest only while it runs Wasm code; a
//!   guest asleep in the host (a `monotonic-clock` subscription it blocks on, a `poll`) would
//!   outlast it. Each wait here ends at the deadline of the call it is part of
//!   (`sandbox.execution_timeout_ms`) with a typed [`Interrupted::Deadline`] trap, reported as that
//!   deadline, exactly as a spinning guest's is.
//! - **By cancellation.** A `poll` or pollable wait (a sleep ends in one) during an execution whose
//!   requests have all been cancelled (their clients gone) ends early, as if ready, once per call:
//!   the plugin gets to its next `is-cancelled` check and can stop as it sees fit (Triton leaves
//!   the reaction to cancellation to the backend). Later waits run to their end or the deadline,
//!   so a plugin that ignores cancellation does not spin.
use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamError, StreamResult};
use wasmtime_wasi::runtime::in_tokio;
use wasmtime_wasi_io::bindings::wasi::io::{poll as async_poll, streams as async_streams};

use crate::request::Job;

/// How often a wait looks whether its requests have been cancelled.
const CANCEL_CHECK: Duration = Duration::from_millis(10);

/// The trap of a WASI call that would block where the sandbox may not.
#[derive(Debug)]
pub struct WouldBlock;

impl std::fmt::Display for WouldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a blocking WASI call (a wait, a print) during an inline execution")
    }
}

impl std::error::Error for WouldBlock {}

/// The trap of a wait cut short.
#[derive(Debug, PartialEq, Eq)]
pub enum Interrupted {
    /// The call's deadline came while the guest waited.
    Deadline,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Interrupted::Deadline => "the call's deadline came during a blocking WASI call",
        })
    }
}

impl std::error::Error for Interrupted {}

/// The sandbox's resource table, whether its calls may block now, until when, and the requests
/// whose cancellation ends a wait.
pub struct IoGuard<'a> {
    pub table: &'a mut ResourceTable,
    pub may_block: bool,
    /// The deadline of the call in progress (none between calls).
    pub deadline: Option<Instant>,
    /// The requests being executed (none outside `execute`).
    pub jobs: Option<&'a [Job]>,
    /// Whether a wait of this call has already ended early for cancellation.
    pub cancel_told: &'a mut bool,
}

/// An error type a trap becomes: itself for `wasi:io/poll`, a stream error for `wasi:io/streams`.
trait FromTrap {
    fn from_trap(trap: wasmtime::Error) -> Self;
}

impl FromTrap for wasmtime::Error {
    fn from_trap(trap: wasmtime::Error) -> Self {
        trap
    }
}

impl FromTrap for StreamError {
    fn from_trap(trap: wasmtime::Error) -> Self {
        StreamError::Trap(trap)
    }
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

    /// Runs the wait `f` on the table until it ends, or until the deadline, which traps with
    /// [`Interrupted::Deadline`]. With `on_cancel`, the wait also ends — with that value — when
    /// every request of the batch has been cancelled, once per call.
    fn wait<T, E: FromTrap>(
        &mut self,
        on_cancel: Option<T>,
        f: impl AsyncFnOnce(&mut ResourceTable) -> Result<T, E>,
    ) -> Result<T, E> {
        self.allowed().map_err(E::from_trap)?;
        let deadline = self.deadline;
        let jobs = self.jobs.filter(|_| on_cancel.is_some() && !*self.cancel_told);
        let cancelled = || jobs.is_some_and(|jobs| !jobs.is_empty() && jobs.iter().all(|j| j.sender.is_cancelled()));
        let (table, cancel_told) = (&mut *self.table, &mut *self.cancel_told);
        let mut on_cancel = on_cancel;
        in_tokio(async move {
            let waited = f(table);
            tokio::pin!(waited);
            let mut check = tokio::time::interval(CANCEL_CHECK);
            let expiry = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(expiry);
            loop {
                tokio::select! {
                    biased;
                    done = &mut waited => return done,
                    () = &mut expiry => return Err(E::from_trap(wasmtime::Error::new(Interrupted::Deadline))),
                    _ = check.tick(), if jobs.is_some() => {
                        if cancelled() && let Some(value) = on_cancel.take() {
                            *cancel_told = true;
                            return Ok(value);
                        }
                    }
                }
            }
        })
    }
}

impl poll::Host for IoGuard<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        // Cancelled, every pollable counts as ready: the plugin looks at its requests again.
        let all = (0..pollables.len() as u32).collect();
        self.wait(Some(all), async move |table| async_poll::Host::poll(table, pollables).await)
    }
}

impl poll::HostPollable for IoGuard<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        self.allowed()?;
        poll::HostPollable::ready(self.table, pollable)
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        self.wait(Some(()), async move |table| async_poll::HostPollable::block(table, pollable).await)
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
        self.wait(None, async move |table| {
            async_streams::HostOutputStream::blocking_write_and_flush(table, stream, bytes).await
        })
    }

    fn blocking_write_zeroes_and_flush(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        self.stream_allowed()?;
        self.wait(None, async move |table| {
            async_streams::HostOutputStream::blocking_write_zeroes_and_flush(table, stream, len).await
        })
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
        self.wait(None, async move |table| async_streams::HostOutputStream::blocking_flush(table, stream).await)
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
        self.wait(None, async move |table| async_streams::HostOutputStream::blocking_splice(table, dst, src, len).await)
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
        self.wait(None, async move |table| async_streams::HostInputStream::blocking_read(table, stream, len).await)
    }

    fn skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        streams::HostInputStream::skip(self.table, stream, len)
    }

    fn blocking_skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        self.stream_allowed()?;
        self.wait(None, async move |table| async_streams::HostInputStream::blocking_skip(table, stream, len).await)
    }

    fn subscribe(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostInputStream::subscribe(self.table, stream)
    }
}
