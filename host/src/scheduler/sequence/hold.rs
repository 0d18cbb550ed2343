//! tritonserver's test hooks for the sequence batcher, which Triton's QA suite
//! (L0_sequence_batcher) sets to make batches deterministic: with
//! `TRITONSERVER_DELAY_SCHEDULER=N` in the environment the batcher forms no batch until `N`
//! requests wait in the slots, and with `TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M` also `M` in the
//! backlog; once both are reached it schedules as usual for good. Read once, when the model loads;
//! unset (the normal case) they cost nothing.
use std::time::Duration;

/// How often a held batcher looks again (tritonserver's 10 ms).
pub const POLL: Duration = Duration::from_millis(10);

/// The counts a batcher waits for before its first batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    queued: usize,
    backlogged: usize,
}

impl Hold {
    /// The hold the environment asks for, if any.
    pub fn from_env() -> Option<Hold> {
        let count = |key: &str| std::env::var(key).ok().and_then(|v| v.trim().parse::<usize>().ok()).unwrap_or(0);
        Hold::new(count("TRITONSERVER_DELAY_SCHEDULER"), count("TRITONSERVER_BACKLOG_DELAY_SCHEDULER"))
    }

    /// A hold until `queued` requests wait in slots and `backlogged` in the backlog; none when
    /// `queued` is zero (tritonserver looks at the backlog only while it delays).
    pub fn new(queued: usize, backlogged: usize) -> Option<Hold> {
        (queued > 0).then(|| {
            tracing::info!("Delaying scheduler until {queued} queued requests ({backlogged} in the backlog)...");
            Hold { queued, backlogged }
        })
    }

    /// Whether `queued` requests in slots and `backlogged` in the backlog release it.
    pub fn released_by(&self, queued: usize, backlogged: usize) -> bool {
        queued >= self.queued && backlogged >= self.backlogged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_waits_for_both_counts() {
        assert_eq!(Hold::new(0, 3), None, "no hold without a queued count");
        let hold = Hold::new(4, 2).unwrap();
        assert!(!hold.released_by(3, 2));
        assert!(!hold.released_by(4, 1));
        assert!(hold.released_by(4, 2));
        assert!(hold.released_by(9, 9));
    }
}
