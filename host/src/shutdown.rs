//! Stopping the server without losing a request, in tritonserver's order and with its log lines.
//!
//! 1. **Connections drain.** Readiness turns false; the HTTP and gRPC listeners stop taking
//!    connections (a new one is refused), and the open ones are served until they close: an
//!    HTTP/1.1 answer says `Connection: close`, gRPC sends GOAWAY and finishes the calls in flight.
//!    At once and then each second the log says what is left ("Timeout 30: Found 1 HTTP service connections").
//! 2. **Models stop.** New requests are refused ("Server is stopping, …", except the rest of a
//!    sequence already started) and health answers "Server exiting"; the requests in flight are
//!    answered ("Timeout 28: Found 1 model versions that have in-flight inferences").
//! 3. **Models unload** ("All models are stopped, unloading models").
//!
//! The three share `--exit-timeout-secs`: what is still running when it expires is cut off, and
//! logged model by model.
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::frontend::connections::Connections;
use crate::server::Server;

/// How often the in-flight count is looked at while the models drain.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(10);

/// The frontends' open connections, as a shutdown waits for them.
#[derive(Clone, Default)]
pub struct OpenConnections {
    pub http: Connections,
    pub grpc: Connections,
}

/// How a shutdown ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every connection closed, every request was answered and every model unloaded in time.
    Drained,
    /// The exit timeout expired first; what was cut off has been logged.
    TimedOut,
}

/// Runs a shutdown to its end (see the module's doc). `stop_listeners` tells the frontends to
/// stop taking connections. Blocks in `spawn_blocking` while the models unload.
pub async fn run(
    server: Arc<Server>,
    connections: &OpenConnections,
    stop_listeners: impl FnOnce(),
    exit_timeout: Duration,
) -> Outcome {
    let countdown = Countdown::new(exit_timeout);
    server.begin_shutdown();
    stop_listeners();
    if !drain_connections(connections, &countdown).await {
        return cut_off(&server);
    }
    server.stop_models();
    tracing::info!("Waiting for in-flight requests to complete.");
    if !drain_requests(&server, &countdown).await {
        return cut_off(&server);
    }
    tracing::info!("All models are stopped, unloading models");
    let unloading = tokio::task::spawn_blocking({
        let server = server.clone();
        move || server.unload_all()
    });
    match tokio::time::timeout_at(countdown.deadline, unloading).await {
        Ok(_) => Outcome::Drained,
        Err(_) => cut_off(&server),
    }
}

/// Stage 1: waits until no connection is open, logging what is at once and then each second, as
/// tritonserver does (so the first line is certain whenever a connection was open when the
/// shutdown began); false if the deadline came first.
async fn drain_connections(connections: &OpenConnections, countdown: &Countdown) -> bool {
    loop {
        let (http, grpc) = (connections.http.count(), connections.grpc.count());
        if http == 0 && grpc == 0 {
            return true;
        }
        let left = countdown.seconds_left();
        if http > 0 {
            tracing::info!("Timeout {left}: Found {http} HTTP service connections");
        }
        if grpc > 0 {
            tracing::info!("Timeout {left}: Found {grpc} gRPC service connections and inference handlers");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = async {
                connections.http.all_closed().await;
                connections.grpc.all_closed().await;
            } => {}
            () = tokio::time::sleep_until(countdown.deadline) => return false,
        }
    }
}

/// Stage 2: waits until no model version has a request in flight, logging which have at once (how
/// many, if none) and then each second; false if the deadline came first.
async fn drain_requests(server: &Server, countdown: &Countdown) -> bool {
    let mut next_report = Instant::now();
    loop {
        let in_flight = server.in_flight();
        // The first report is logged even when nothing is in flight, as tritonserver's is.
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(1);
            let left = countdown.seconds_left();
            tracing::info!("Timeout {left}: Found {} model versions that have in-flight inferences", in_flight.len());
            for (model, version, requests) in &in_flight {
                tracing::info!("Model '{model}' (version {version}) has {requests} in-flight inferences");
            }
        }
        if in_flight.is_empty() {
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep(IN_FLIGHT_POLL) => {}
            () = tokio::time::sleep_until(countdown.deadline) => return false,
        }
    }
}

/// Logs the expiry and, model by model, what was still in flight.
fn cut_off(server: &Server) -> Outcome {
    log_cut_off(server, "Exit timeout expired. Exiting immediately.");
    Outcome::TimedOut
}

/// Logs why the shutdown ends early and, model by model, what was still in flight.
pub fn log_cut_off(server: &Server, why: &str) {
    tracing::error!("{why}");
    for (model, version, requests) in server.in_flight() {
        tracing::error!("cut off: model '{model}' version {version} had {requests} request(s) in flight or queued");
    }
}

/// The exit timeout's deadline, and the whole seconds left as the log counts them down.
struct Countdown {
    deadline: Instant,
}

impl Countdown {
    fn new(timeout: Duration) -> Self {
        Countdown { deadline: Instant::now() + timeout }
    }

    /// Whole seconds to the deadline, rounded up: the timeout itself at first, as tritonserver
    /// logs it ("Timeout 30: …" with the default).
    fn seconds_left(&self) -> u64 {
        self.seconds_left_at(Instant::now())
    }

    fn seconds_left_at(&self, now: Instant) -> u64 {
        let left = self.deadline.saturating_duration_since(now);
        left.as_secs() + u64::from(left.subsec_nanos() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_countdown_starts_at_the_timeout_and_rounds_up() {
        let start = Instant::now();
        let countdown = Countdown { deadline: start + Duration::from_secs(30) };
        assert_eq!(countdown.seconds_left_at(start), 30);
        assert_eq!(countdown.seconds_left_at(start + Duration::from_millis(1)), 30);
        assert_eq!(countdown.seconds_left_at(start + Duration::from_millis(1000)), 29);
        assert_eq!(countdown.seconds_left_at(start + Duration::from_secs(41)), 0);
    }

    #[tokio::test]
    async fn connections_drain_when_the_last_one_closes_and_not_after_the_deadline() {
        // A deadline an hour away: the drain can only end because the connection closed.
        let connections = OpenConnections::default();
        let countdown = Countdown::new(Duration::from_secs(3600));
        let guard = connections.grpc.open();
        let closer = tokio::spawn(async move {
            tokio::task::yield_now().await;
            drop(guard);
        });
        let drained = tokio::time::timeout(Duration::from_secs(60), drain_connections(&connections, &countdown));
        assert!(drained.await.expect("the drain did not end when the last connection closed"));
        closer.await.unwrap();

        // A deadline already past: a connection that stays open runs out the time at once.
        let _stays = connections.http.open();
        let passed = Countdown { deadline: Instant::now() };
        assert!(!drain_connections(&connections, &passed).await, "a connection that stays open runs out the time");
        assert_eq!(passed.seconds_left(), 0);
    }
}
