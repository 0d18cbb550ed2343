//! What an accept loop does when `accept` fails.
//!
//! A connection that went away before it was taken (reset, aborted, refused) costs nothing: the
//! next one is taken at once. Anything else, above all running out of file descriptors, leaves the
//! pending connection in the backlog, and `accept` would fail again at once: a loop that retried
//! straight away would spin a core and write the same warning thousands of times a second until
//! descriptors came back. So it waits a moment first, as axum's and hyper's own accept loops do,
//! and says so once per pause.
use std::io;
use std::time::Duration;

/// How long an accept loop rests after a failure other than a connection's own.
const PAUSE: Duration = Duration::from_millis(100);

/// Whether an `accept` error belongs to one connection (taking the next is fine).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
    )
}

/// Handles a failed `accept` of the `frontend` (for the log): at once for a connection's own
/// error, after a pause for any other.
pub async fn after_error(frontend: &str, e: &io::Error) {
    if is_connection_error(e) {
        tracing::debug!("{frontend}: a connection went away before it was accepted: {e}");
        return;
    }
    tracing::warn!("{frontend}: accepting a connection failed ({e}); trying again in {} ms", PAUSE.as_millis());
    tokio::time::sleep(PAUSE).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_s_own_error_is_retried_at_once() {
        assert!(is_connection_error(&io::Error::from(io::ErrorKind::ConnectionAborted)));
        // EMFILE: the process is out of file descriptors.
        assert!(!is_connection_error(&io::Error::from_raw_os_error(24)));
    }
}
