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
        let mut watch = self.watch();
        loop {
            tokio::time::sleep(period).await;
            if watch.period_ended() {
                return;
            }
        }
    }

    /// Starts watching: each [`Watch::period_ended`] then says whether the period before it was quiet.
    fn watch(&self) -> Watch<'_> {
        Watch { activity: self, seen: self.started.load(Ordering::Relaxed) }
    }
}

/// The watchdog's view of its connection, period by period (the clock is [`Activity::quiet_for`]'s).
struct Watch<'a> {
    activity: &'a Activity,
    /// Request heads received when the period began.
    seen: u64,
}

impl Watch<'_> {
    /// Ends a period: whether no request started in it and none is in flight. Begins the next one.
    fn period_ended(&mut self) -> bool {
        let started = self.activity.started.load(Ordering::Relaxed);
        let quiet = started == self.seen && self.activity.finished.load(Ordering::Relaxed) == started;
        self.seen = started;
        quiet
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
    use super::*;

    // The periods are counted here, not timed: `quiet_for` only sleeps one period between them.

    #[test]
    fn an_idle_connection_is_quiet_after_one_period() {
        let activity = Activity::default();
        let mut watch = activity.watch();
        assert!(watch.period_ended());
    }

    #[test]
    fn a_request_in_flight_keeps_its_connection_however_long_it_runs() {
        let activity = Activity::default();
        let mut watch = activity.watch();
        let request = activity.begin();
        for _ in 0..5 {
            assert!(!watch.period_ended());
        }
        drop(request);
        assert!(watch.period_ended());
    }

    #[test]
    fn a_request_each_period_keeps_the_connection_open() {
        let activity = Activity::default();
        let mut watch = activity.watch();
        for _ in 0..5 {
            drop(activity.begin());
            assert!(!watch.period_ended());
        }
        // The first period in which no request starts closes it.
        assert!(watch.period_ended());
    }

    #[tokio::test]
    async fn quiet_for_resolves_for_an_idle_connection() {
        Activity::default().quiet_for(Duration::from_millis(1)).await;
    }
}
