//! `preserve_ordering`: responses leave in the order their batches were formed, whichever instance
//! finishes first. Each formed batch takes a ticket; a finished batch waits here until every batch
//! with an earlier ticket has been delivered.
use std::collections::BTreeMap;

use parking_lot::Mutex;

use super::flush;
use crate::request::Job;

#[derive(Default)]
pub struct OrderedDelivery {
    inner: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    /// The ticket whose batch goes next.
    next: u64,
    finished: BTreeMap<u64, Vec<Job>>,
}

impl OrderedDelivery {
    /// Delivers `batch` (formed with `ticket`) and every batch it was holding back.
    pub fn deliver(&self, ticket: u64, batch: Vec<Job>) {
        let mut pending = self.inner.lock();
        pending.finished.insert(ticket, batch);
        loop {
            let next = pending.next;
            let Some(mut ready) = pending.finished.remove(&next) else { break };
            flush(&mut ready);
            pending.next += 1;
        }
    }
}
