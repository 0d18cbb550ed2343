//! A frontend's open connections, counted, so that a shutdown can wait for them to close and say
//! how many it waits for (tritonserver's "Timeout 30: Found 1 HTTP service connections").
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
