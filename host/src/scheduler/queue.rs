//! The dynamic batcher's queue: one FIFO per priority level, each under its queue policy
//! (`default_queue_policy` / `priority_queue_policy`), as Triton's `PriorityQueue` keeps them.
//!
//! A request whose timeout expires while queued is rejected ("Request timeout expired") or, under a
//! DELAY policy, moved behind the level's unexpired requests: it still runs, but only after them.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::schema::{ModelDynamicBatching, ModelQueuePolicy, model_queue_policy::TimeoutAction};
use crate::request::Job;

/// What Triton answers a request rejected because its level's queue is full.
pub const QUEUE_FULL: &str = "Exceeds maximum queue size";
/// What Triton answers a request whose queue timeout expired under a REJECT policy.
pub const TIMEOUT_EXPIRED: &str = "Request timeout expired";

/// A queue policy, read once from the configuration.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueuePolicy {
    pub delay_on_timeout: bool,
    pub default_timeout: Option<Duration>,
    pub allow_timeout_override: bool,
    /// 0 means unbounded.
    pub max_queue_size: usize,
}

impl QueuePolicy {
    fn from_config(p: &ModelQueuePolicy) -> Self {
        QueuePolicy {
            delay_on_timeout: p.timeout_action == TimeoutAction::Delay as i32,
            default_timeout: (p.default_timeout_microseconds > 0)
                .then(|| Duration::from_micros(p.default_timeout_microseconds)),
            allow_timeout_override: p.allow_timeout_override,
            max_queue_size: p.max_queue_size as usize,
        }
    }

    /// The timeout a request gets: the default, or — where overriding is allowed — the request's
    /// own `timeout` when it is shorter (Triton never lets a request lengthen it, and with no
    /// default timeout there is nothing to shorten).
    fn timeout(&self, requested_us: u64) -> Option<Duration> {
        let default = self.default_timeout?;
        let requested = Duration::from_micros(requested_us);
        Some(if self.allow_timeout_override && requested_us != 0 && requested < default { requested } else { default })
    }
}

/// A request waiting in the batcher.
#[derive(Debug)]
pub struct Queued {
    pub job: Job,
    /// How many inferences it carries (its batch dimension).
    pub batch_size: usize,
    /// When its queue timeout expires, if it has one.
    pub deadline: Option<Instant>,
}

#[derive(Debug, Default)]
struct Level {
    policy: QueuePolicy,
    queue: VecDeque<Queued>,
    /// Requests whose timeout expired under a DELAY policy: they run after `queue`.
    delayed: VecDeque<Queued>,
}

impl Level {
    fn len(&self) -> usize {
        self.queue.len() + self.delayed.len()
    }
}

/// The queues of every priority level, highest priority (level 1, or the single level 0) first.
#[derive(Debug)]
pub struct PriorityQueues {
    levels: Vec<Level>,
    /// The level a request with no (or an out-of-range) priority goes to, as an index of `levels`.
    default_level: usize,
    /// The earliest `deadline` of any request in a non-delayed queue, to know when to look again.
    next_deadline: Option<Instant>,
    len: usize,
}

impl PriorityQueues {
    pub fn new(config: &ModelDynamicBatching) -> Self {
        let default_policy = QueuePolicy::from_config(&config.default_queue_policy.unwrap_or_default());
        let count = config.priority_levels.max(1) as usize;
        let levels = (1..=count as u64)
            .map(|level| Level {
                policy: config
                    .priority_queue_policy
                    .get(&level)
                    .map(QueuePolicy::from_config)
                    .unwrap_or(default_policy),
                ..Default::default()
            })
            .collect();
        let default_level =
            if config.priority_levels == 0 { 0 } else { config.default_priority_level.max(1) as usize - 1 };
        PriorityQueues { levels, default_level, next_deadline: None, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `job` at its priority (0 or beyond the last level means the default level, as in
    /// Triton). A full queue hands the job back, to be answered with [`QUEUE_FULL`].
    pub fn push(&mut self, job: Job, batch_size: usize, now: Instant) -> Result<(), Box<Job>> {
        let priority = job.request.priority as usize;
        let index = if priority == 0 || priority > self.levels.len() || self.levels.len() == 1 {
            self.default_level
        } else {
            priority - 1
        };
        let level = &mut self.levels[index];
        if level.policy.max_queue_size != 0 && level.len() >= level.policy.max_queue_size {
            return Err(Box::new(job));
        }
        let deadline = level.policy.timeout(job.request.timeout_us).map(|t| now + t);
        if let Some(d) = deadline {
            self.next_deadline = Some(self.next_deadline.map_or(d, |n| n.min(d)));
        }
        level.queue.push_back(Queued { job, batch_size, deadline });
        self.len += 1;
        Ok(())
    }

    /// Applies the queue policies to every request whose timeout has expired by `now`: DELAY moves it
    /// behind its level's unexpired requests, REJECT removes it into `rejected`.
    pub fn expire(&mut self, now: Instant, rejected: &mut Vec<Queued>) {
        if self.next_deadline.is_none_or(|d| d > now) {
            return;
        }
        let mut next = None::<Instant>;
        for level in &mut self.levels {
            let mut kept = VecDeque::with_capacity(level.queue.len());
            for q in level.queue.drain(..) {
                match q.deadline {
                    Some(d) if d <= now && level.policy.delay_on_timeout => level.delayed.push_back(q),
                    Some(d) if d <= now => rejected.push(q),
                    Some(d) => {
                        next = Some(next.map_or(d, |n| n.min(d)));
                        kept.push_back(q);
                    }
                    None => kept.push_back(q),
                }
            }
            level.queue = kept;
        }
        self.len -= rejected.len().min(self.len);
        self.next_deadline = next;
    }

    /// Removes every request whose client has gone (see [`Job`]'s sender), in queue order.
    pub fn remove_cancelled(&mut self) -> Vec<Queued> {
        let mut out = Vec::new();
        for level in &mut self.levels {
            for queue in [&mut level.queue, &mut level.delayed] {
                if queue.iter().any(|q| q.job.sender.is_cancelled()) {
                    let (gone, kept): (VecDeque<Queued>, VecDeque<Queued>) =
                        queue.drain(..).partition(|q| q.job.sender.is_cancelled());
                    *queue = kept;
                    out.extend(gone);
                }
            }
        }
        self.len -= out.len().min(self.len);
        out
    }

    /// When the next queued request's timeout expires.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.next_deadline
    }

    /// The queued requests in the order batches take them: by level, each level's unexpired
    /// requests before its delayed ones.
    pub fn iter(&self) -> impl Iterator<Item = &Queued> {
        self.levels.iter().flat_map(|l| l.queue.iter().chain(l.delayed.iter()))
    }

    /// Removes the first `n` requests in [`iter`](Self::iter) order.
    pub fn take(&mut self, mut n: usize) -> Vec<Queued> {
        let mut out = Vec::with_capacity(n);
        for level in &mut self.levels {
            for q in [&mut level.queue, &mut level.delayed] {
                let k = n.min(q.len());
                out.extend(q.drain(..k));
                n -= k;
            }
            if n == 0 {
                break;
            }
        }
        self.len -= out.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{InferenceRequest, ResponseSender};
    use crate::stats::ModelStats;
    use std::sync::Arc;

    fn job(priority: u64, timeout_us: u64) -> Job {
        let (sender, _rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
        let request =
            InferenceRequest { id: format!("p{priority}t{timeout_us}"), priority, timeout_us, ..Default::default() };
        Job { request, sender, enqueued: Instant::now() }
    }

    fn policy(action: TimeoutAction, timeout_us: u64, allow_override: bool, max: u32) -> ModelQueuePolicy {
        ModelQueuePolicy {
            timeout_action: action as i32,
            default_timeout_microseconds: timeout_us,
            allow_timeout_override: allow_override,
            max_queue_size: max,
        }
    }

    fn ids(q: &PriorityQueues) -> Vec<String> {
        q.iter().map(|q| q.job.request.id.clone()).collect()
    }

    #[test]
    fn priorities_order_levels_and_out_of_range_goes_to_default() {
        let cfg = ModelDynamicBatching { priority_levels: 3, default_priority_level: 2, ..Default::default() };
        let mut q = PriorityQueues::new(&cfg);
        let now = Instant::now();
        for p in [0, 3, 1, 9, 2] {
            q.push(job(p, 0), 1, now).unwrap();
        }
        assert_eq!(ids(&q), ["p1t0", "p0t0", "p9t0", "p2t0", "p3t0"]);
        assert_eq!(q.take(2).len(), 2);
        assert_eq!(q.len(), 3);
    }

    #[test]
    fn a_full_level_hands_the_request_back() {
        let cfg = ModelDynamicBatching {
            default_queue_policy: Some(policy(TimeoutAction::Reject, 0, false, 1)),
            ..Default::default()
        };
        let mut q = PriorityQueues::new(&cfg);
        q.push(job(0, 0), 1, Instant::now()).unwrap();
        let refused = q.push(job(0, 3), 1, Instant::now()).unwrap_err();
        assert_eq!(refused.request.id, "p0t3");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn timeouts_reject_or_delay_and_override_only_shortens() {
        let now = Instant::now();
        let later = now + Duration::from_millis(2);
        for (action, expect_rejected, expect_order) in [
            (TimeoutAction::Reject, vec!["p0t1000"], vec!["p0t0", "p0t9000000"]),
            (TimeoutAction::Delay, vec![], vec!["p0t0", "p0t9000000", "p0t1000"]),
        ] {
            let cfg = ModelDynamicBatching {
                default_queue_policy: Some(policy(action, 10_000_000, true, 0)),
                ..Default::default()
            };
            let mut q = PriorityQueues::new(&cfg);
            for t in [1000, 0, 9_000_000] {
                q.push(job(0, t), 1, now).unwrap();
            }
            let mut rejected = Vec::new();
            q.expire(later, &mut rejected);
            let rejected: Vec<_> = rejected.iter().map(|r| r.job.request.id.as_str()).collect();
            assert_eq!(rejected, expect_rejected);
            assert_eq!(ids(&q), expect_order);
            assert_eq!(q.len(), expect_order.len());
        }
    }

    #[test]
    fn no_default_timeout_means_requests_cannot_set_one() {
        let cfg = ModelDynamicBatching {
            default_queue_policy: Some(policy(TimeoutAction::Reject, 0, true, 0)),
            ..Default::default()
        };
        let mut q = PriorityQueues::new(&cfg);
        q.push(job(0, 1), 1, Instant::now()).unwrap();
        assert_eq!(q.next_deadline(), None);
    }
}
