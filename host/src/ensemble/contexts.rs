//! The tensors of one ensemble request, in contexts: the request's own (the root), and one per
//! response of a decoupled step with everything computed from it (a child of the context that step
//! ran in). A step runs once in the deepest context its inputs come from. A tensor may be known to
//! be absent (`None`): an optional input the request left out, or an output a step's response did
//! not have; a step reading it runs without that input (which its model must take as optional), and
//! a requested ensemble output that is absent is left out of the response, as tritonserver's
//! ensembles do.
//!
//! A decoupled step may answer without end (a token stream, a camera's frames): each response's
//! context is released, its tensors dropped and its slot reused, once nothing can read or change
//! it again. That is when no step runs or waits to run in it or below it (`active`), no step that
//! answers once runs or waits in a context above it (`changers`: its outputs would land where the
//! context sees them), and no step of the request waits for its sequence's turn (the caller holds
//! the releases back meanwhile). A decoupled step running above it does not hold it: its responses
//! start contexts of their own. The request's memory then follows the contexts in use, not the
//! responses sent. Slots are reused, so an index says nothing of age: [`Contexts::born`] does.
use std::collections::HashMap;

use super::batch_dims;
use crate::request::Tensor;

/// An ensemble tensor and the batch size of what produced it (0: a model or a request that does
/// not batch), which decides its shape where it meets a model that batches differently.
pub(super) struct Held {
    pub tensor: Tensor,
    pub batch_size: u64,
}

impl Held {
    pub fn new(tensor: Tensor, batching: bool) -> Self {
        Held { batch_size: batch_dims::batch_size(batching, &tensor.shape), tensor }
    }

    /// The tensor as `name` where it meets `dims` of something that batches or not.
    pub fn meeting(&self, name: &str, dims: Option<&[i64]>, batching: bool) -> Tensor {
        let shape = dims.and_then(|d| batch_dims::reshaped(d, batching, self.batch_size, &self.tensor.shape));
        Tensor {
            name: name.to_string(),
            shape: shape.unwrap_or_else(|| self.tensor.shape.clone()),
            ..self.tensor.clone()
        }
    }
}

/// What a context's tensors are, by ensemble tensor name.
pub(super) type Tensors = HashMap<String, Option<Held>>;

/// One context (module documentation).
pub(super) struct Context {
    parent: Option<usize>,
    /// The live contexts started by this one's decoupled steps' responses.
    children: Vec<usize>,
    depth: usize,
    own: Tensors,
    /// Per step: whether it was launched in this context.
    pub launched: Vec<bool>,
    pub answered: bool,
    /// Steps running or waiting to run (`max_inflight_requests`) in this context or below it.
    active: usize,
    /// Steps running or waiting in this very context that may add to its tensors: those that answer
    /// once (a waiting step counts until it is known to stream).
    changers: usize,
    /// Released: its slot waits in the free list.
    released: bool,
    /// When it was created, counted from the root's 0.
    born: u64,
}

/// The contexts of one ensemble request; indices stay valid while their context is live.
pub(super) struct Contexts {
    slots: Vec<Context>,
    free: Vec<usize>,
    steps: usize,
    /// Contexts created so far.
    created: u64,
}

impl std::ops::Index<usize> for Contexts {
    type Output = Context;
    fn index(&self, c: usize) -> &Context {
        &self.slots[c]
    }
}

impl std::ops::IndexMut<usize> for Contexts {
    fn index_mut(&mut self, c: usize) -> &mut Context {
        &mut self.slots[c]
    }
}

impl Contexts {
    /// The root context (index 0), holding the request's tensors, for an ensemble of `steps` steps.
    pub fn new(own: Tensors, steps: usize) -> Self {
        let root = Context {
            parent: None,
            children: Vec::new(),
            depth: 0,
            own,
            launched: vec![false; steps],
            answered: false,
            active: 0,
            changers: 0,
            released: false,
            born: 0,
        };
        Contexts { slots: vec![root], free: Vec::new(), steps, created: 1 }
    }

    /// A new context below `parent`, holding `own` (one response of a decoupled step).
    pub fn add_child(&mut self, parent: usize, own: Tensors) -> usize {
        let child = Context {
            parent: Some(parent),
            children: Vec::new(),
            depth: self.slots[parent].depth + 1,
            own,
            launched: vec![false; self.steps],
            answered: false,
            active: 0,
            changers: 0,
            released: false,
            born: self.created,
        };
        self.created += 1;
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index] = child;
                index
            }
            None => {
                self.slots.push(child);
                self.slots.len() - 1
            }
        };
        self.slots[parent].children.push(index);
        index
    }

    /// Adds tensors a step that answers once produced in `context`.
    pub fn extend(&mut self, context: usize, produced: Tensors) {
        self.slots[context].own.extend(produced);
    }

    /// When `context` was created: the order in which contexts are looked at (a decoupled step's
    /// responses are answered in the order they came).
    pub fn born(&self, context: usize) -> u64 {
        self.slots[context].born
    }

    /// The contexts in use.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// The most contexts in use at once so far: slots are only added when none is free.
    pub fn peak(&self) -> usize {
        self.slots.len()
    }

    /// `context` and every context below it: those that see its tensors, where a change to them
    /// may let a step run or complete an answer.
    pub fn with_descendants(&self, context: usize, into: &mut Vec<usize>) {
        let mut stack = vec![context];
        while let Some(c) = stack.pop() {
            into.push(c);
            stack.extend(self.slots[c].children.iter().copied());
        }
    }

    /// `name` as `context` sees it (`Some(None)`: known to be absent), with the context it comes
    /// from; `None` while it does not exist yet.
    pub fn resolve(&self, mut context: usize, name: &str) -> Option<(Option<&Held>, usize)> {
        loop {
            let c = &self.slots[context];
            if let Some(t) = c.own.get(name) {
                return Some((t.as_ref(), context));
            }
            context = c.parent?;
        }
    }

    /// Whether every name resolves from `context`, the deepest of them coming from `context` itself.
    pub fn complete_in(&self, context: usize, names: &mut dyn Iterator<Item = &str>) -> bool {
        let mut deepest = 0;
        for name in names {
            match self.resolve(context, name) {
                Some((_, from)) => deepest = deepest.max(self.slots[from].depth),
                None => return false,
            }
        }
        deepest == self.slots[context].depth
    }

    /// A step starts running or waiting in `context`; `changes` unless it is known to stream.
    pub fn started(&mut self, context: usize, changes: bool) {
        self.slots[context].changers += usize::from(changes);
        let mut at = Some(context);
        while let Some(c) = at {
            self.slots[c].active += 1;
            at = self.slots[c].parent;
        }
    }

    /// A step that waited in `context` turned out to stream when it launched. Returns whether no
    /// changer is left there: the contexts below it may be idle now.
    pub fn streams(&mut self, context: usize) -> bool {
        self.slots[context].changers -= 1;
        self.slots[context].changers == 0
    }

    /// A step that ran in `context` finished; `changed` if it counted as a changer. Returns the
    /// highest context other than the root in which, and below which, no step runs any more (a
    /// candidate for [`Self::release_idle`]). A context's `active` is at least its children's, so
    /// the idle ones on the way up are the first few.
    pub fn finished(&mut self, context: usize, changed: bool) -> Option<usize> {
        self.slots[context].changers -= usize::from(changed);
        let mut idle = None;
        let mut at = Some(context);
        while let Some(c) = at {
            let slot = &mut self.slots[c];
            slot.active -= 1;
            if slot.active == 0 && c != 0 {
                idle = Some(c);
            }
            at = slot.parent;
        }
        idle
    }

    /// Releases each of `candidates` that nothing can read or change again (module documentation),
    /// with everything below it. The caller holds this back while a step of the request waits for
    /// its sequence's turn. The root is never released: the final answer reads it.
    pub fn release_idle(&mut self, candidates: &[usize]) {
        let mut subtree = Vec::new();
        let mut parents = Vec::new();
        for &c in candidates {
            let slot = &self.slots[c];
            if c == 0 || slot.released || slot.active > 0 {
                continue;
            }
            let mut above = slot.parent;
            let mut still_changing = false;
            while let Some(a) = above {
                still_changing |= self.slots[a].changers > 0;
                above = self.slots[a].parent;
            }
            if still_changing {
                continue;
            }
            parents.extend(slot.parent);
            subtree.clear();
            // Children released earlier in this call are still listed (below), with none of their own.
            self.with_descendants(c, &mut subtree);
            for &s in &subtree {
                let slot = &mut self.slots[s];
                if slot.released {
                    continue;
                }
                slot.released = true;
                slot.own = Tensors::new();
                slot.children = Vec::new();
                slot.launched = Vec::new();
                self.free.push(s);
            }
        }
        // Once per parent: a parent whose N children go at once costs N, not N².
        parents.sort_unstable();
        parents.dedup();
        for p in parents {
            let mut children = std::mem::take(&mut self.slots[p].children);
            children.retain(|&k| !self.slots[k].released);
            self.slots[p].children = children;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DataType;

    fn tensors(names: &[&str]) -> Tensors {
        names
            .iter()
            .map(|n| {
                let t =
                    Tensor { name: n.to_string(), datatype: DataType::Fp32, shape: vec![1], data: vec![0; 4].into() };
                (n.to_string(), Some(Held::new(t, false)))
            })
            .collect()
    }

    /// A decoupled step in the root streams responses; each starts a context where a step that
    /// answers once runs and finishes: the contexts in use stay one, however many responses come.
    #[test]
    fn a_long_stream_keeps_only_the_contexts_in_use() {
        let mut c = Contexts::new(tensors(&["IN"]), 2);
        c.started(0, false); // the decoupled step, streaming
        for _ in 0..1000 {
            let child = c.add_child(0, tensors(&["TOKEN"]));
            c.started(child, true);
            assert!(c.live() <= 2, "{} contexts live", c.live());
            let idle = c.finished(child, true);
            c.extend(child, tensors(&["OUT"]));
            assert_eq!(idle, Some(child));
            c.release_idle(&[child]);
        }
        assert_eq!(c.live(), 1);
        assert_eq!(c.peak(), 2, "one slot, reused");
    }

    /// A step that answers once, running in the root, may still complete what a response's context
    /// waits for: that context is kept until it finishes.
    #[test]
    fn a_context_is_kept_while_a_step_above_it_may_add_what_it_reads() {
        let mut c = Contexts::new(tensors(&["IN"]), 3);
        c.started(0, false); // streaming
        c.started(0, true); // answers once, slowly
        let child = c.add_child(0, tensors(&["TOKEN"]));
        c.release_idle(&[child]);
        assert_eq!(c.live(), 2, "released while a step above could still add its input");
        assert!(c.resolve(child, "TOKEN").is_some());
        // The slow step finishes: its output completes the child's inputs, a step runs there.
        assert_eq!(c.finished(0, true), None, "the root is never a candidate");
        c.extend(0, tensors(&["SLOW"]));
        c.started(child, true);
        c.release_idle(&[child]);
        assert_eq!(c.live(), 2, "a step runs in it");
        assert_eq!(c.finished(child, true), Some(child));
        c.release_idle(&[child]);
        assert_eq!(c.live(), 1);
    }

    /// Nested streams: a context is released with everything below it once the stream in it ends,
    /// and not before.
    #[test]
    fn a_context_goes_with_its_descendants_once_its_stream_ends() {
        let mut c = Contexts::new(tensors(&["IN"]), 3);
        c.started(0, false);
        let a = c.add_child(0, tensors(&["A"]));
        c.started(a, false); // a second decoupled step, streaming in `a`
        let b1 = c.add_child(a, tensors(&["B"]));
        let b2 = c.add_child(a, tensors(&["B"]));
        c.started(b2, true);
        c.release_idle(&[a, b1]);
        assert_eq!(c.live(), 3, "b1 idle, released; a still streams, b2 runs");
        assert!(!c.slots[b2].released && c.slots[b1].released);
        assert_eq!(c.finished(b2, true), Some(b2));
        assert_eq!(c.finished(a, false), Some(a), "the highest idle context");
        c.release_idle(&[b2, a]);
        assert_eq!(c.live(), 1);
        assert_eq!(c.free.len(), 3, "each slot freed once");
        // Slots are reused, each with its new parent, and younger than every context before.
        let next = c.add_child(0, tensors(&["A"]));
        assert!([a, b1, b2].contains(&next));
        assert_eq!(c.slots[0].children, vec![next]);
        assert_eq!(c.slots[next].depth, 1);
        assert!(c.born(next) > c.born(b2));
    }

    /// A step that waited (`max_inflight_requests`) counts as one that may add to its context until
    /// it launches; launched as a stream, it no longer holds the contexts below.
    #[test]
    fn a_waiting_step_holds_the_contexts_below_until_it_turns_out_to_stream() {
        let mut c = Contexts::new(tensors(&["IN"]), 2);
        c.started(0, false);
        c.started(0, true); // waiting for a slot
        let child = c.add_child(0, tensors(&["TOKEN"]));
        c.release_idle(&[child]);
        assert_eq!(c.live(), 2);
        assert!(c.streams(0), "no changer left in the root");
        c.release_idle(&[child]);
        assert_eq!(c.live(), 1);
    }
}
