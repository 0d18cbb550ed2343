//! A frontend's open connections, counted, so that a shutdown can wait for them to close and say
//! how many it waits for (tritonserver's "Timeout 30: Found 1 HTTP service connections").
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// The count of one frontend's open connections; clones share it.
#[derive(Clone, Default)]
pub struct Connections(Arc<Shared>);

#[derive(Default)]
struct Shared {
    open: AtomicUsize,
    /// Woken each time a connection closes.
    closed: Notify,
}

impl Connections {
    /// Counts a connection until the returned guard is dropped.
    pub fn open(&self) -> ConnectionGuard {
        self.0.open.fetch_add(1, Ordering::AcqRel);
        ConnectionGuard(self.clone())
    }

    /// How many are open now.
    pub fn count(&self) -> usize {
        self.0.open.load(Ordering::Acquire)
    }

    /// Waits until none is open.
    pub async fn all_closed(&self) {
        loop {
            // Registered before the count is read, so a close in between still wakes it.
            let closed = self.0.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            closed.await;
        }
    }
}

/// Holds one connection in its [`Connections`] count.
pub struct ConnectionGuard(Connections);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.0.closed.notify_waiters();
    }
}

/// A TCP stream counted in its frontend's [`Connections`] while it lives (for servers, such as
/// tonic's, that own their connections' tasks).
pub struct Counted {
    stream: TcpStream,
    _guard: ConnectionGuard,
}

impl Counted {
    pub fn new(stream: TcpStream, connections: &Connections) -> Self {
        Counted { stream, _guard: connections.open() }
    }
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Counted {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_until_the_last_guard_drops() {
        let connections = Connections::default();
        assert_eq!(connections.count(), 0);
        connections.all_closed().await;
        let a = connections.open();
        let b = connections.open();
        assert_eq!(connections.count(), 2);
        let waiting = tokio::spawn({
            let connections = connections.clone();
            async move { connections.all_closed().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one connection is still open");
        drop(b);
        waiting.await.unwrap();
        assert_eq!(connections.count(), 0);
    }
}
