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
//! body that stalls is the body timeout's business (408). So does a streamed answer (generate's
//! server-sent events) while it moves: a period in which it sent an event, or in which it waited
//! for the model's next one, is not quiet, however long the stream lasts. One whose client stopped
//! reading sends nothing and waits for nothing of the model's (hyper no longer asks it for
//! events), and is closed like any quiet connection.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a connection has done: request heads received and requests answered, and its streamed
/// answers' progress.
#[derive(Debug, Default)]
pub struct Activity {
    started: AtomicU64,
    finished: AtomicU64,
    /// Frames its streamed answers have sent.
    sent: AtomicU64,
    /// Its streamed answers now waiting for the model's next event.
    waiting: AtomicU64,
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
        Watch { activity: self, seen: self.started.load(Ordering::Relaxed), sent: self.sent.load(Ordering::Relaxed) }
    }

    /// Records a frame a streamed answer sent.
    pub fn frame_sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a streamed answer starting (`true`) or ending (`false`) a wait for the model.
    pub fn waiting_for_model(&self, waiting: bool) {
        if waiting {
            self.waiting.fetch_add(1, Ordering::Relaxed);
        } else {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The watchdog's view of its connection, period by period (the clock is [`Activity::quiet_for`]'s).
struct Watch<'a> {
    activity: &'a Activity,
    /// Request heads received when the period began.
    seen: u64,
    /// Streamed frames sent when the period began.
    sent: u64,
}

impl Watch<'_> {
    /// Ends a period: whether no request started in it, none is in flight, and no streamed answer
    /// sent a frame in it or waits for the model now. Begins the next one.
    fn period_ended(&mut self) -> bool {
        let a = self.activity;
        let started = a.started.load(Ordering::Relaxed);
        let sent = a.sent.load(Ordering::Relaxed);
        let quiet = started == self.seen
            && a.finished.load(Ordering::Relaxed) == started
            && sent == self.sent
            && a.waiting.load(Ordering::Relaxed) == 0;
        (self.seen, self.sent) = (started, sent);
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

    #[test]
    fn a_stream_that_sends_or_waits_for_its_model_keeps_the_connection_open() {
        let activity = Activity::default();
        let mut watch = activity.watch();
        // The answer's head went out: the request's handler is done, its stream is not.
        drop(activity.begin());
        assert!(!watch.period_ended());
        for _ in 0..3 {
            activity.frame_sent();
            assert!(!watch.period_ended(), "an event each period");
        }
        activity.waiting_for_model(true);
        for _ in 0..3 {
            assert!(!watch.period_ended(), "a model slow to answer");
        }
        activity.waiting_for_model(false);
        activity.frame_sent();
        assert!(!watch.period_ended());
        // Nothing sent and nothing awaited: the client stopped reading.
        assert!(watch.period_ended());
    }

    #[tokio::test]
    async fn quiet_for_resolves_for_an_idle_connection() {
        Activity::default().quiet_for(Duration::from_millis(1)).await;
    }
}
