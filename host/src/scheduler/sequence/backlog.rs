//! The sequences waiting for a slot, first come first served.
//!
//! Every request routed to the sequence batcher asks whether its sequence is backlogged, under the
//! model's lock, and the reaper asks which backlogged sequence expires next. A list searched from
//! the front made both cost the length of the backlog: one client streaming STARTs of new IDs
//! while every slot was held made each further request of every client slower, and the lock held
//! longer. Here the open sequences are found by ID, and the expiries kept in order, so routing a
//! request costs the same whatever the backlog holds.
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::request::{CorrelationId, Job};

/// A backlogged sequence: its requests so far.
pub(super) struct Backlogged {
    pub id: CorrelationId,
    pub queue: VecDeque<Job>,
    /// Its END request has arrived: later requests with this ID belong to another sequence.
    pub ended: bool,
    /// The earliest deadline of its requests' `timeout`s, if any has one.
    expires: Option<Instant>,
}

#[derive(Default)]
pub(super) struct Backlog {
    /// By arrival: the key is the order in which the sequences were backlogged.
    order: BTreeMap<u64, Backlogged>,
    /// The backlogged sequence of each ID whose END has not arrived (at most one per ID).
    open: HashMap<CorrelationId, u64>,
    /// (expiry, key) of every backlogged sequence that has one, the earliest first.
    expiring: BTreeSet<(Instant, u64)>,
    next_key: u64,
    /// Requests held by all of them.
    requests: usize,
}

impl Backlog {
    /// Backlogged sequences.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Requests the backlogged sequences hold.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Adds `job`, which arrived `now`, to the open backlogged sequence `id`, marking it ended
    /// when `end`. Gives the job back when no such sequence is backlogged. `Ok(Some(at))`: the
    /// sequence now expires at `at`, sooner than before.
    #[allow(clippy::result_large_err)]
    pub fn join(&mut self, id: &CorrelationId, job: Job, end: bool, now: Instant) -> Result<Option<Instant>, Job> {
        let Some(&key) = self.open.get(id) else { return Err(job) };
        let Some(b) = self.order.get_mut(&key) else {
            self.open.remove(id);
            return Err(job);
        };
        if end {
            b.ended = true;
            self.open.remove(id);
        }
        Ok(self.push(key, job, now))
    }

    /// Backlogs a new sequence `id` with its first request, `job`, which arrived `now`. `Some(at)`:
    /// it expires at `at`.
    pub fn start(&mut self, id: CorrelationId, job: Job, end: bool, now: Instant) -> Option<Instant> {
        let key = self.next_key;
        self.next_key += 1;
        if !end {
            self.open.insert(id.clone(), key);
        }
        self.order.insert(key, Backlogged { id, queue: VecDeque::new(), ended: end, expires: None });
        self.push(key, job, now)
    }

    fn push(&mut self, key: u64, job: Job, now: Instant) -> Option<Instant> {
        let b = self.order.get_mut(&key)?;
        let timeout = job.request.timeout_us;
        b.queue.push_back(job);
        self.requests += 1;
        if timeout == 0 {
            return None;
        }
        let at = now.checked_add(Duration::from_micros(timeout))?;
        if b.expires.is_some_and(|e| e <= at) {
            return None;
        }
        if let Some(old) = b.expires.replace(at) {
            self.expiring.remove(&(old, key));
        }
        self.expiring.insert((at, key));
        Some(at)
    }

    /// The sequence backlogged first, taken out.
    pub fn pop_front(&mut self) -> Option<Backlogged> {
        let (key, b) = self.order.pop_first()?;
        Some(self.forget(key, b))
    }

    /// The sequences whose expiry is at or before `now`, taken out.
    pub fn take_expired(&mut self, now: Instant) -> Vec<Backlogged> {
        let mut expired = Vec::new();
        while let Some(&(at, key)) = self.expiring.first()
            && at <= now
        {
            if let Some(b) = self.order.remove(&key) {
                expired.push(self.forget(key, b));
            } else {
                self.expiring.pop_first();
            }
        }
        expired
    }

    /// The sequences with a request whose client has gone, taken out.
    pub fn take_cancelled(&mut self) -> Vec<Backlogged> {
        let keys: Vec<u64> = self
            .order
            .iter()
            .filter(|(_, b)| b.queue.iter().any(|j| j.sender.is_cancelled()))
            .map(|(key, _)| *key)
            .collect();
        keys.into_iter().filter_map(|key| self.order.remove(&key).map(|b| self.forget(key, b))).collect()
    }

    /// When the next backlogged sequence expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.expiring.first().map(|(at, _)| *at)
    }

    /// Every backlogged sequence, taken out.
    pub fn drain(&mut self) -> Vec<Backlogged> {
        let all = std::mem::take(&mut self.order);
        self.open.clear();
        self.expiring.clear();
        self.requests = 0;
        all.into_values().collect()
    }

    /// Drops what refers to `b` (taken out of `order` under `key`).
    fn forget(&mut self, key: u64, b: Backlogged) -> Backlogged {
        if self.open.get(&b.id) == Some(&key) {
            self.open.remove(&b.id);
        }
        if let Some(at) = b.expires {
            self.expiring.remove(&(at, key));
        }
        self.requests -= b.queue.len();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{InferenceRequest, ResponseSender};
    use crate::stats::ModelStats;
    use std::sync::Arc;

    fn job(timeout_us: u64) -> Job {
        let (sender, _rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
        let request = InferenceRequest { timeout_us, ..Default::default() };
        Job { request, sender, enqueued: Instant::now() }
    }

    #[test]
    fn a_sequence_with_a_cancelled_request_is_taken_out_whole() {
        let now = Instant::now();
        let mut clients = Vec::new();
        // A job whose client still waits (`job`'s has gone by the time it returns).
        let mut live = |timeout_us: u64| {
            let (sender, rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
            clients.push(rx);
            Job { request: InferenceRequest { timeout_us, ..Default::default() }, sender, enqueued: now }
        };
        let mut b = Backlog::default();
        b.start(id(1), live(0), false, now);
        b.start(id(2), live(5_000), false, now);
        assert!(b.join(&id(2), job(0), false, now).is_ok());
        assert!(b.join(&id(2), live(0), false, now).is_ok());
        let taken = b.take_cancelled();
        assert_eq!(taken.iter().map(|t| (t.id.clone(), t.queue.len())).collect::<Vec<_>>(), [(id(2), 3)]);
        assert_eq!((b.len(), b.requests(), b.next_expiry()), (1, 1, None));
        assert!(b.join(&id(2), job(0), false, now).is_err(), "a cancelled sequence is forgotten");
        assert!(b.take_cancelled().is_empty());
    }

    fn id(n: u64) -> CorrelationId {
        CorrelationId::Numeric(n)
    }

    #[test]
    fn sequences_are_found_by_id_served_in_order_and_expire_by_their_earliest_timeout() {
        let now = Instant::now();
        let mut b = Backlog::default();
        assert_eq!(b.start(id(1), job(0), false, now), None);
        assert_eq!(b.start(id(2), job(5_000), false, now), Some(now + Duration::from_millis(5)));
        // A later request with a sooner timeout brings the expiry closer; a later one does not.
        assert_eq!(b.join(&id(2), job(2_000), false, now).ok(), Some(Some(now + Duration::from_millis(2))));
        assert_eq!(b.join(&id(2), job(9_000), false, now).ok(), Some(None));
        assert!(b.join(&id(3), job(0), false, now).is_err(), "3 is not backlogged");
        // Its END closes sequence 1: a later request with its ID belongs to a new sequence.
        assert!(b.join(&id(1), job(0), true, now).is_ok());
        assert!(b.join(&id(1), job(0), false, now).is_err());
        b.start(id(1), job(0), false, now);
        assert_eq!((b.len(), b.requests()), (3, 6));
        assert_eq!(b.next_expiry(), Some(now + Duration::from_millis(2)));

        assert!(b.take_expired(now + Duration::from_millis(1)).is_empty());
        let expired = b.take_expired(now + Duration::from_millis(2));
        assert_eq!(expired.iter().map(|e| (e.id.clone(), e.queue.len())).collect::<Vec<_>>(), [(id(2), 3)]);
        assert_eq!((b.len(), b.requests(), b.next_expiry()), (2, 3, None));
        assert!(b.join(&id(2), job(0), false, now).is_err(), "an expired sequence is forgotten");

        let first = b.pop_front().unwrap();
        assert_eq!((first.id, first.queue.len(), first.ended), (id(1), 2, true));
        // The new sequence 1 is still open after the ended one left.
        assert!(b.join(&id(1), job(0), false, now).is_ok());
        assert_eq!(b.drain().len(), 1);
        assert_eq!((b.len(), b.requests()), (0, 0));
    }
}
