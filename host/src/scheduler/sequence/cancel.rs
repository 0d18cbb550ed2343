//! Cancelled sequences. A sequence's state depends on each of its requests in turn, so once one of
//! them is cancelled (its client went away, its gRPC call or stream was cancelled) the rest of the
//! sequence cannot run as its client meant: tritonserver ends the whole sequence
//! (`sequence_batch_scheduler.cc`, `MarkRequestsCancelled`), and so does this.
//!
//! - In a slot, the requests queued before the cancelled one still run (they are the sequence as
//!   its client sent it so far); the cancelled one, those after it and those that arrive for the
//!   sequence meanwhile are answered CANCELLED, and the slot is released once the earlier ones ran
//!   (at once when none is left), going to the next backlogged sequence as any released slot.
//! - A backlogged sequence with a cancelled request is answered CANCELLED whole: none of it ran.
//!
//! tritonserver finds a cancelled request only when an instance next looks at the slot's head, or
//! when the slot goes to the backlog; a frontend here reports a client that went away
//! ([`Schedule::drop_cancelled`](crate::scheduler::Schedule::drop_cancelled)), and the sequence is
//! ended then: its waiting requests are answered, and its slot freed, without waiting for whatever
//! the instance executes meanwhile. Streamed requests (no report) are found as tritonserver finds
//! them. A later request of a cancelled sequence, once its slot was released, is refused like any
//! request of an unknown sequence without START.
use super::{Shared, SlotRef, State, id_text};
use crate::error::{ErrorKind, InferError};
use crate::request::Job;

impl Shared {
    /// Ends every sequence with a cancelled request waiting, in a slot or the backlog; the requests
    /// to answer go to `state.cancelled`.
    pub(super) fn cancel_sequences(&self, state: &mut State) {
        for i in 0..state.slots.len() {
            for s in 0..state.slots[i].len() {
                if let Some(k) = state.slots[i][s].queue.iter().position(|j| j.sender.is_cancelled()) {
                    self.cancel_slot(state, (i, s), k);
                }
            }
        }
        for b in state.backlog.take_cancelled() {
            state.cancelled.extend(b.queue);
        }
    }

    /// Ends the sequences of instance `i`'s slots whose next request is cancelled (what an instance
    /// finds when it looks for work). Whether any was.
    pub(super) fn cancel_heads(&self, state: &mut State, i: usize) -> bool {
        let mut any = false;
        for s in 0..state.slots[i].len() {
            if state.slots[i][s].queue.front().is_some_and(|j| j.sender.is_cancelled()) {
                self.cancel_slot(state, (i, s), 0);
                any = true;
            }
        }
        any
    }

    /// Ends the sequence in slot `at` from its `k`th queued request on.
    fn cancel_slot(&self, state: &mut State, at: SlotRef, k: usize) {
        let slot = &mut state.slots[at.0][at.1];
        if let Some(id) = &slot.sequence {
            tracing::debug!("model '{}': sequence {} cancelled", self.model, id_text(id));
        }
        let rest: Vec<Job> = slot.queue.drain(k..).collect();
        let done = slot.queue.is_empty() && !slot.busy;
        // Released now when nothing of the sequence runs or waits; else once that has run.
        slot.cancelled = !done;
        state.cancelled.extend(rest);
        if done {
            self.release(state, at);
        }
    }

    /// The first backlogged sequence none of whose requests is cancelled, taken out; those passed
    /// over on the way are answered CANCELLED (`state.cancelled`).
    pub(super) fn next_backlogged(&self, state: &mut State) -> Option<super::backlog::Backlogged> {
        loop {
            let b = state.backlog.pop_front()?;
            if !b.queue.iter().any(|j| j.sender.is_cancelled()) {
                return Some(b);
            }
            tracing::debug!("model '{}': backlogged sequence {} cancelled", self.model, id_text(&b.id));
            state.cancelled.extend(b.queue);
        }
    }

    /// Answers the requests of cancelled sequences CANCELLED (outside the model's lock: an answer
    /// may run its client's continuation, e.g. an ensemble's next step). Those whose client went
    /// away are counted as such; every one counts as a failure of reason CANCELED.
    pub(super) fn answer_cancelled(&self, jobs: Vec<Job>) {
        for mut job in jobs {
            if job.sender.is_cancelled() {
                crate::scheduler::answer_cancelled(&self.stats, &mut job);
            } else {
                let id = id_text(&job.request.correlation_id);
                job.fail(InferError::new(ErrorKind::Cancelled, format!("sequence {id} was cancelled")));
                job.sender.flush();
            }
        }
    }
}
