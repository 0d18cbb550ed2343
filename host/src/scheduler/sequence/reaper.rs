//! One thread that releases the idle sequences of every sequence-batched model, instead of one per
//! model: a server with thousands of such models would otherwise hold a thread for each, and wake
//! each of them every `max_sequence_idle_microseconds` with nothing to do. A model is on the timer
//! only while one of its slots holds a sequence (it arms it when a slot takes one); at its deadline
//! the thread asks it to release what has been idle too long, and it says when to ask again, or
//! that nothing is left to watch.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{LazyLock, Weak};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// A model whose idle sequences the reaper releases.
pub(super) trait Reap: Send + Sync {
    /// Releases the sequences idle past the model's limit at `now`; returns when to look again,
    /// `None` once no slot holds a sequence (the model arms the timer again when one does).
    fn reap(&self, now: Instant) -> Option<Instant>;
}

/// The process's reaper (started on first use; it sleeps while no model is armed).
pub(super) static REAPER: LazyLock<Reaper> = LazyLock::new(Reaper::default);

#[derive(Default)]
pub(super) struct Reaper {
    timers: Mutex<Timers>,
    changed: Condvar,
}

#[derive(Default)]
struct Timers {
    /// Deadlines, earliest first; an entry whose deadline no longer matches its model's is stale.
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    models: HashMap<u64, Entry>,
    next_id: u64,
    thread: bool,
}

struct Entry {
    model: Weak<dyn Reap>,
    /// The deadline it is armed for, if any.
    armed: Option<Instant>,
}

/// A model's registration; unregisters when dropped.
pub(super) struct Registration {
    reaper: &'static Reaper,
    id: u64,
}

impl Reaper {
    /// Registers `model`, unarmed.
    pub fn register(&'static self, model: Weak<dyn Reap>) -> Registration {
        let mut timers = self.timers.lock();
        let id = timers.next_id;
        timers.next_id += 1;
        timers.models.insert(id, Entry { model, armed: None });
        if !timers.thread {
            timers.thread = std::thread::Builder::new()
                .name("nereus-sequence-reaper".into())
                .spawn(move || self.run())
                .map_err(|e| tracing::error!("the sequence reaper could not start: {e}"))
                .is_ok();
        }
        Registration { reaper: self, id }
    }

    fn unregister(&self, id: u64) {
        self.timers.lock().models.remove(&id);
    }

    fn run(&self) {
        let mut timers = self.timers.lock();
        loop {
            let now = Instant::now();
            match timers.due.peek() {
                None => {
                    self.changed.wait(&mut timers);
                    continue;
                }
                Some(Reverse((at, _))) if *at > now => {
                    let at = *at;
                    self.changed.wait_until(&mut timers, at);
                    continue;
                }
                Some(_) => {}
            }
            let Some(Reverse((at, id))) = timers.due.pop() else { continue };
            let Some(entry) = timers.models.get_mut(&id) else { continue };
            if entry.armed != Some(at) {
                continue; // re-armed for another time since
            }
            entry.armed = None;
            let Some(model) = entry.model.upgrade() else {
                timers.models.remove(&id);
                continue;
            };
            // The model's own lock is taken without the reaper's: a model arms the timer under
            // its lock, so holding both here the other way round could deadlock.
            let next = parking_lot::MutexGuard::unlocked(&mut timers, || model.reap(now));
            if let Some(next) = next
                && let Some(entry) = timers.models.get_mut(&id)
                && entry.armed.is_none_or(|armed| next < armed)
            {
                entry.armed = Some(next);
                timers.due.push(Reverse((next, id)));
            }
        }
    }
}

impl Registration {
    /// Asks the reaper to call the model at `at` (or sooner, if already armed sooner).
    pub fn arm(&self, at: Instant) {
        let mut timers = self.reaper.timers.lock();
        let Some(entry) = timers.models.get_mut(&self.id) else { return };
        if entry.armed.is_some_and(|armed| armed <= at) {
            return;
        }
        entry.armed = Some(at);
        let earliest = timers.due.peek().is_none_or(|Reverse((first, _))| at < *first);
        timers.due.push(Reverse((at, self.id)));
        if earliest {
            self.reaper.changed.notify_one();
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.reaper.unregister(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Reports each call, and asks to be called again `again` times.
    struct Model {
        calls: Mutex<mpsc::Sender<Instant>>,
        again: Mutex<u32>,
    }

    impl Reap for Model {
        fn reap(&self, now: Instant) -> Option<Instant> {
            let _ = self.calls.lock().send(now);
            let mut again = self.again.lock();
            (*again > 0).then(|| {
                *again -= 1;
                now + Duration::from_millis(5)
            })
        }
    }

    fn model(again: u32) -> (Arc<Model>, mpsc::Receiver<Instant>) {
        let (tx, rx) = mpsc::channel();
        (Arc::new(Model { calls: Mutex::new(tx), again: Mutex::new(again) }), rx)
    }

    #[test]
    fn an_armed_model_is_called_at_its_deadlines_until_it_has_nothing_to_watch() {
        let reaper: &'static Reaper = Box::leak(Box::default());
        let (a, calls) = model(2);
        let registration = reaper.register(Arc::downgrade(&(a.clone() as Arc<dyn Reap>)));
        let (b, b_calls) = model(0);
        let _b = reaper.register(Arc::downgrade(&(b.clone() as Arc<dyn Reap>)));
        let armed = Instant::now() + Duration::from_millis(20);
        registration.arm(armed);
        // Arming later than it already is changes nothing.
        registration.arm(armed + Duration::from_secs(60));
        let first = calls.recv_timeout(Duration::from_secs(10)).expect("called at its deadline");
        assert!(first >= armed);
        for _ in 0..2 {
            calls.recv_timeout(Duration::from_secs(10)).expect("called again when it asked");
        }
        assert!(calls.recv_timeout(Duration::from_millis(100)).is_err(), "not after it said None");
        assert!(b_calls.try_recv().is_err(), "a model never armed is never called");
        // Armed again, and unregistered before its deadline: not called.
        registration.arm(Instant::now() + Duration::from_millis(30));
        drop(registration);
        assert!(calls.recv_timeout(Duration::from_millis(200)).is_err());
    }
}
