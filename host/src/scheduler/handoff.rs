//! Requests left for whoever holds a busy instance: flat combining.
//!
//! A model with one instance served by two I/O threads often gets two requests at once. The second
//! thread used to wait for the instance (spinning, then sleeping on a futex, then being woken by the
//! unlock: two system calls and two context switches for a few microseconds of work) or hand the
//! request to the instance's worker thread (waking it). Instead it leaves the request here and goes
//! back to its connections; the thread holding the instance runs it before letting go.
//!
//! The rule that keeps every request run: whoever holds an instance, after letting go, looks here
//! again and runs what it finds on any free instance ([`super::default`]). A thread leaving a request
//! pushes first and then tries the instances. The queue's lock orders the two: either the holder's
//! look after its unlock sees the request, or it came before the push, and then the unlock came
//! before the pusher's try and the pusher finds the instance free (or held by a newer holder, which
//! looks again in turn).
use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::request::Job;

#[derive(Default)]
pub struct Handoff {
    jobs: Mutex<VecDeque<Job>>,
}

impl Handoff {
    pub fn push(&self, job: Job) {
        self.jobs.lock().push_back(job);
    }

    /// The oldest request left, first in, first run.
    pub fn pop(&self) -> Option<Job> {
        self.jobs.lock().pop_front()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.lock().is_empty()
    }

    /// Every request left, oldest first, for the workers to run.
    pub fn take_all(&self) -> Vec<Job> {
        self.jobs.lock().drain(..).collect()
    }

    pub fn len(&self) -> usize {
        self.jobs.lock().len()
    }
}
