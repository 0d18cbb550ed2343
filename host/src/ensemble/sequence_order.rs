//! The order in which the requests of one sequence reach each step's model.
//!
//! A sequence model must see a sequence's requests in the order they were sent: the first carries
//! the START flag, and its state runs through the rest. An ensemble request launches its first
//! steps on the caller's thread (in arrival order), but a later step is launched by the request's
//! own task when the step before it answers, and two tasks woken one after the other may run in
//! either order. tritonserver launches the next step from the completion callback of the one
//! before it, on the backend thread that completed it, which keeps the order a one-instance step
//! answered in, and sends the ensemble's response from the completion callback of its last step,
//! so a sequence's responses leave in the order its requests came (a gRPC stream client takes the
//! last response it reads as the sequence's result). Here each request of a sequence takes a
//! ticket when it arrives, may launch a step only once every earlier request of the same sequence
//! still in flight has launched it, and sends its response only once every earlier one has ended;
//! a request that ends (answered, failed, cancelled) gives up its turns.
//!
//! A request waits for an earlier one's launch of the same step, or for the earlier ones to end
//! once it holds nothing but its response, so the earliest request in flight never waits and no
//! request waits forever: each earlier request reaches the step or ends.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::request::CorrelationId;

/// The requests in flight of every sequence, per ensemble.
#[derive(Default)]
pub(super) struct SequenceOrder {
    sequences: Arc<Mutex<HashMap<CorrelationId, Turns>>>,
}

/// One sequence's requests in flight, by ticket: which steps each has launched.
struct Turns {
    next: u64,
    live: BTreeMap<u64, Vec<bool>>,
    /// Bumped when a request launches a step or ends while a later one is in flight.
    changed: watch::Sender<()>,
}

impl Turns {
    /// Wakes the later requests of the sequence, if any is in flight: request `number` launched a
    /// step or ended.
    fn wake_after(&self, number: u64) {
        if self.live.range(number + 1..).next().is_some() {
            self.changed.send_replace(());
        }
    }
}

impl SequenceOrder {
    /// A ticket for a request of sequence `id` (`None` for a request outside any sequence, which
    /// is never held back), with room for `steps` steps. Tickets are numbered in the order this
    /// is called: call it where the request arrives, before anything can reorder it.
    pub(super) fn ticket(&self, id: &CorrelationId, steps: usize) -> Option<Ticket> {
        if *id == CorrelationId::None {
            return None;
        }
        let mut sequences = self.sequences.lock();
        let turns = sequences.entry(id.clone()).or_insert_with(|| Turns {
            next: 0,
            live: BTreeMap::new(),
            changed: watch::channel(()).0,
        });
        let number = turns.next;
        turns.next += 1;
        turns.live.insert(number, vec![false; steps]);
        Some(Ticket { sequences: self.sequences.clone(), id: id.clone(), number, changed: turns.changed.subscribe() })
    }
}

/// A request's place in its sequence; dropping it gives up its turns.
pub(super) struct Ticket {
    sequences: Arc<Mutex<HashMap<CorrelationId, Turns>>>,
    id: CorrelationId,
    number: u64,
    changed: watch::Receiver<()>,
}

impl Ticket {
    /// Starts a look at the steps this request may launch: what happens from here on wakes
    /// [`Self::changed`]. Called once before the [`Self::may_launch`] calls of one look, not in each:
    /// a launch seen as done between two of them would otherwise count as seen for a step looked
    /// at before it, and the request would sleep past it until some later change.
    pub(super) fn look(&mut self) {
        self.changed.borrow_and_update();
    }

    /// Whether every earlier request of the sequence still in flight has launched `step`.
    pub(super) fn may_launch(&self, step: usize) -> bool {
        let sequences = self.sequences.lock();
        let Some(turns) = sequences.get(&self.id) else { return true };
        turns.live.range(..self.number).all(|(_, launched)| launched.get(step).copied().unwrap_or(true))
    }

    /// Records that this request launched `step`, which may let a later one launch it.
    pub(super) fn launched(&self, step: usize) {
        let mut sequences = self.sequences.lock();
        let Some(turns) = sequences.get_mut(&self.id) else { return };
        let Some(launched) = turns.live.get_mut(&self.number) else { return };
        if let Some(l) = launched.get_mut(step).filter(|l| !**l) {
            *l = true;
            turns.wake_after(self.number);
        }
    }

    /// Waits until every earlier request of the sequence has ended: this one's response is next.
    pub(super) async fn first_in_line(&mut self) {
        loop {
            self.changed.borrow_and_update();
            let first = {
                let sequences = self.sequences.lock();
                sequences.get(&self.id).is_none_or(|turns| turns.live.range(..self.number).next().is_none())
            };
            if first {
                return;
            }
            self.changed().await;
        }
    }

    /// Waits until a request of the sequence launches a step or ends (after [`Self::may_launch`]
    /// said no).
    pub(super) async fn changed(&mut self) {
        // The sender lives as long as this ticket's entry, which this ticket keeps.
        if self.changed.changed().await.is_err() {
            std::future::pending::<()>().await
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut sequences = self.sequences.lock();
        let Some(turns) = sequences.get_mut(&self.id) else { return };
        turns.live.remove(&self.number);
        if turns.live.is_empty() {
            sequences.remove(&self.id);
        } else {
            turns.wake_after(self.number);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn seq(n: u64) -> CorrelationId {
        CorrelationId::Numeric(n)
    }

    #[test]
    fn a_request_outside_a_sequence_takes_no_ticket() {
        assert!(SequenceOrder::default().ticket(&CorrelationId::None, 2).is_none());
    }

    #[test]
    fn a_later_request_waits_for_the_earlier_to_launch_the_same_step() {
        let order = SequenceOrder::default();
        let first = order.ticket(&seq(7), 2).unwrap();
        let second = order.ticket(&seq(7), 2).unwrap();
        assert!(first.may_launch(0));
        assert!(!second.may_launch(0));
        first.launched(0);
        assert!(second.may_launch(0));
        second.launched(0);
        // Step 1: the first has not launched it yet, whatever the second has done.
        assert!(!second.may_launch(1));
        assert!(first.may_launch(1));
    }

    #[test]
    fn another_sequence_is_not_held_back() {
        let order = SequenceOrder::default();
        let _first = order.ticket(&seq(1), 1).unwrap();
        let other = order.ticket(&CorrelationId::Text("a".into()), 1).unwrap();
        assert!(other.may_launch(0));
    }

    #[test]
    fn a_request_that_ends_gives_up_its_turns_and_the_sequence_is_forgotten() {
        let order = SequenceOrder::default();
        let first = order.ticket(&seq(3), 1).unwrap();
        let second = order.ticket(&seq(3), 1).unwrap();
        assert!(!second.may_launch(0));
        drop(first);
        assert!(second.may_launch(0));
        drop(second);
        assert!(order.sequences.lock().is_empty());
    }

    #[tokio::test]
    async fn a_response_waits_for_the_earlier_requests_to_end() {
        let order = SequenceOrder::default();
        let first = order.ticket(&seq(5), 1).unwrap();
        let mut second = order.ticket(&seq(5), 1).unwrap();
        let mut third = order.ticket(&seq(5), 1).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let waiter = tokio::spawn(async move {
            third.first_in_line().await;
            tx.send(()).unwrap();
        });
        assert!(second.first_in_line().now_or_never().is_none(), "the second answered before the first ended");
        drop(first);
        second.first_in_line().await;
        assert!(rx.try_recv().is_err(), "the third answered before the second ended");
        drop(second);
        waiter.await.unwrap();
        assert!(rx.recv().await.is_some());
    }

    /// A launch between two checks of one look still wakes the request: it missed it for the step
    /// checked before.
    #[test]
    fn a_launch_during_a_look_wakes_the_request_after_it() {
        let order = SequenceOrder::default();
        let first = order.ticket(&seq(4), 2).unwrap();
        let mut second = order.ticket(&seq(4), 2).unwrap();
        second.look();
        assert!(!second.may_launch(0));
        first.launched(0);
        assert!(!second.may_launch(1));
        assert!(second.changed().now_or_never().is_some(), "the launch of step 0 was swallowed");
        assert!(second.may_launch(0));
    }

    #[tokio::test]
    async fn a_waiting_request_is_woken_by_the_earlier_launch() {
        let order = SequenceOrder::default();
        let first = order.ticket(&seq(9), 1).unwrap();
        let mut second = order.ticket(&seq(9), 1).unwrap();
        second.look();
        assert!(!second.may_launch(0));
        let waiter = tokio::spawn(async move {
            second.changed().await;
            second.may_launch(0)
        });
        first.launched(0);
        assert!(waiter.await.unwrap());
    }
}
