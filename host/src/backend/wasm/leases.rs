//! The server's sandboxes (`--sandbox-total-instances`), lent to model instances on demand.
//!
//! A sandbox holds a slot of the pooling allocator and the instance's linear memory, so there can
//! only be so many at once; models, though, may be many more (a multi-tenant server with one
//! plugin per customer). So an instance holds a [`Lease`] only while it has a sandbox, and an
//! instance at rest can be asked to give its sandbox back when another one needs a lease and none
//! is free: the lender takes it back from the holder that has gone longest unused (the CLOCK
//! algorithm: every holder gets a second chance if it ran since the hand last passed). The
//! instance builds a new sandbox (backend, model and instance initialised again) on its next
//! request. Holders that must keep theirs — an instance that is running, an instance of a
//! sequence-batched model, whose plugin keeps its sequences' state — are passed over.
//!
//! Every lease is counted once: taken from the free count, or handed over by the holder that gave
//! its sandbox back; a lease goes back to the free count when dropped.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// What a holder did when asked to give its sandbox back.
#[derive(Debug)]
pub enum Yielded {
    /// It gave it back: here is its lease.
    Lease(Lease),
    /// It ran since last asked (a second chance), or is running now: ask again later.
    Kept,
    /// It holds no sandbox any more (dropped, or its lease already gone): forget it.
    Nothing,
}

/// An instance whose sandbox may be taken back while it rests.
pub trait Holder: Send + Sync {
    /// Gives the sandbox back if the holder is at rest and has not run since last asked.
    /// Never blocks on the holder (a running holder keeps its sandbox).
    fn give_back(&self) -> Yielded;
}

/// The lender of the server's sandboxes.
pub struct Leases {
    total: u64,
    /// Leases out now.
    out: AtomicU64,
    /// Holders that may be asked to give theirs back, in the CLOCK's order (the hand at the front).
    clock: Mutex<VecDeque<Weak<dyn Holder>>>,
}

/// One of the server's sandboxes, lent until dropped.
#[derive(Debug)]
pub struct Lease {
    lender: Arc<Leases>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases").field("total", &self.total).field("out", &self.out()).finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.lender.out.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Leases {
    pub fn new(total: u64) -> Arc<Self> {
        Arc::new(Leases { total, out: AtomicU64::new(0), clock: Mutex::new(VecDeque::new()) })
    }

    /// How many the server has (`--sandbox-total-instances`).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Leases out now.
    pub fn out(&self) -> u64 {
        self.out.load(Ordering::Acquire)
    }

    /// Lends a sandbox: a free one, else one taken back from a holder at rest. `None` when every
    /// one is held by a running or pinned instance.
    pub fn take(self: &Arc<Self>) -> Option<Lease> {
        if let Some(lease) = self.take_free() {
            return Some(lease);
        }
        // Each holder at most twice round: once to clear its second chance, once to ask again.
        let mut asks = 2 * self.clock.lock().len();
        while asks > 0 {
            asks -= 1;
            let Some(holder) = self.clock.lock().pop_front() else { break };
            let Some(live) = holder.upgrade() else { continue };
            match live.give_back() {
                Yielded::Lease(lease) => return Some(lease),
                Yielded::Kept => self.clock.lock().push_back(holder),
                Yielded::Nothing => {}
            }
            // Another holder may have let one go meanwhile (an unload, a failed build).
            if let Some(lease) = self.take_free() {
                return Some(lease);
            }
        }
        None
    }

    fn take_free(self: &Arc<Self>) -> Option<Lease> {
        self.out
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |out| (out < self.total).then_some(out + 1))
            .ok()
            .map(|_| Lease { lender: self.clone() })
    }

    /// Lets the lender ask `holder` for its sandbox back (call once per lease it takes). Holders
    /// that are gone are swept out as the clock grows past twice the total.
    pub fn enroll(&self, holder: Weak<dyn Holder>) {
        let mut clock = self.clock.lock();
        if clock.len() as u64 >= 2 * self.total.max(1) {
            clock.retain(|h| h.strong_count() > 0);
        }
        clock.push_back(holder);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A holder whose `busy` and `used` say what a real instance's state would.
    struct Fake {
        lease: Mutex<Option<Lease>>,
        used: AtomicBool,
        busy: AtomicBool,
    }

    impl Holder for Fake {
        fn give_back(&self) -> Yielded {
            if self.busy.load(Ordering::Acquire) || self.used.swap(false, Ordering::AcqRel) {
                return Yielded::Kept;
            }
            self.lease.lock().take().map_or(Yielded::Nothing, Yielded::Lease)
        }
    }

    fn holder(leases: &Arc<Leases>) -> Arc<Fake> {
        let fake = Arc::new(Fake {
            lease: Mutex::new(Some(leases.take().expect("a lease"))),
            used: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        });
        let weak: Weak<dyn Holder> = Arc::downgrade(&(fake.clone() as Arc<dyn Holder>));
        leases.enroll(weak);
        fake
    }

    #[test]
    fn free_leases_first_then_the_least_recently_used_holders() {
        let leases = Leases::new(3);
        let (a, b, c) = (holder(&leases), holder(&leases), holder(&leases));
        assert_eq!(leases.out(), 3);
        a.used.store(true, Ordering::Release);
        // `a` ran: its second chance passes the hand to `b`, which had not.
        let lease = leases.take().expect("one taken back");
        assert_eq!(leases.out(), 3, "a lease handed over, not a fourth");
        assert!(b.lease.lock().is_none() && a.lease.lock().is_some() && c.lease.lock().is_some());
        drop(lease);
        assert_eq!(leases.out(), 2);
        assert!(leases.take().is_some(), "a free one again");
    }

    #[test]
    fn running_holders_keep_theirs_and_none_is_lent_past_the_total() {
        let leases = Leases::new(2);
        let (a, b) = (holder(&leases), holder(&leases));
        a.busy.store(true, Ordering::Release);
        b.busy.store(true, Ordering::Release);
        assert!(leases.take().is_none());
        assert_eq!(leases.out(), 2);
        b.busy.store(false, Ordering::Release);
        assert!(leases.take().is_some(), "b at rest now");
        assert!(a.lease.lock().is_some());
    }

    #[test]
    fn holders_that_are_gone_are_forgotten() {
        let leases = Leases::new(2);
        let a = holder(&leases);
        drop(a); // its lease goes with it
        assert_eq!(leases.out(), 0);
        for _ in 0..10 {
            let h = holder(&leases);
            drop(h);
        }
        assert!(leases.clock.lock().len() <= 5, "swept as it grew");
    }
}
