//! Closes HTTP connections whose client has gone quiet: no request head completed and nothing in
//! flight for a whole period (`--http-header-timeout-ms`).
//!
//! This replaces hyper's `header_read_timeout`, which arms a timer for every request head: a boxed
//! sleep registered in tokio's timer wheel while the connection waits for the next request and
//! removed again when it arrives, tens of thousands of times a second under load. That cost
//! HTTP throughput measurably at concurrency 4 on two cores (bench/README.md). The watchdog costs
//! two relaxed atomic increments a request and one timer per period per connection; the price is
//! precision: a quiet connection is closed between one and two periods after its last request.
//! It covers what the per-head timer covered (a client that never finishes its headers, a
//! keep-alive connection left idle) and a client that stops reading its response, for HTTP/1.1
//! and HTTP/2 alike. A request being served keeps its connection open however long it runs; a
//! body that stalls is the body timeout's business (408).
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a connection has done: request heads received and requests answered.
#[derive(Debug, Default)]
pub struct Activity {
    started: AtomicU64,
    finished: AtomicU64,
}

impl Activity {
    /// Records a request whose head has arrived; the returned guard records its end when dropped.
    pub fn begin(&self) -> InFlight<'_> {
        self.started.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }

    /// Resolves once a whole `period` passes with no request started and none in flight.
    pub async fn quiet_for(&self, period: Duration) {
        let mut seen = self.started.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(period).await;
            let started = self.started.load(Ordering::Relaxed);
            if started == seen && self.finished.load(Ordering::Relaxed) == started {
                return;
            }
            seen = started;
        }
    }
}

/// A request in flight on its connection (see [`Activity::begin`]).
#[derive(Debug)]
pub struct InFlight<'a>(&'a Activity);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Waker};

    use super::*;

    const PERIOD: Duration = Duration::from_secs(10);

    /// Moves the paused clock on by `elapsed`, then says whether the watchdog has resolved.
    async fn quiet_after(quiet: &mut Pin<Box<impl Future>>, elapsed: Duration) -> bool {
        tokio::time::advance(elapsed).await;
        quiet.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready()
    }

    fn watch(activity: &Arc<Activity>) -> Pin<Box<impl Future + use<>>> {
        let activity = activity.clone();
        let mut quiet = Box::pin(async move { activity.quiet_for(PERIOD).await });
        assert!(quiet.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        quiet
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_quiet_after_one_period() {
        let activity = Arc::new(Activity::default());
        let mut quiet = watch(&activity);
        assert!(!quiet_after(&mut quiet, PERIOD - Duration::from_millis(1)).await);
        assert!(quiet_after(&mut quiet, Duration::from_millis(1)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_keeps_its_connection_however_long_it_runs() {
        let activity = Arc::new(Activity::default());
        let mut quiet = watch(&activity);
        let request = activity.begin();
        for _ in 0..5 {
            assert!(!quiet_after(&mut quiet, PERIOD).await);
        }
        drop(request);
        assert!(quiet_after(&mut quiet, PERIOD).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_each_period_keeps_the_connection_open() {
        let activity = Arc::new(Activity::default());
        let mut quiet = watch(&activity);
        for _ in 0..5 {
            drop(activity.begin());
            assert!(!quiet_after(&mut quiet, PERIOD).await);
        }
        // The first period in which no request starts closes it.
        assert!(quiet_after(&mut quiet, PERIOD).await);
    }
}
