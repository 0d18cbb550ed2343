//! The call chain a request carries when a model called it (business logic scripting: a plugin
//! calling other models, or an ensemble's step on behalf of such a call): which models it passed
//! through and the deadline it inherited. One type, checked in one place, so that a plugin's calls
//! and an ensemble's steps refuse cycles and runaway depth with the same words.
//!
//! Why a cycle is refused rather than allowed to recurse: the calling instance blocks its own
//! worker while it waits, so a model that reaches itself again (A → A, A → B → A) would wait for
//! an instance it occupies — with one instance, forever. Refusing it is the clear failure.
use std::sync::Arc;
use std::time::Instant;

use crate::error::InferError;

/// How many calls deep a chain may go (a plugin calling a model calling a model …): far more
/// than business logic needs, few enough that a runaway chain stops before it holds many workers.
pub const MAX_CALL_DEPTH: usize = 8;

/// The models a request was called through, outermost first, and the deadline it inherited.
/// Empty for a client's request.
#[derive(Clone, Debug, Default)]
pub struct CallChain {
    models: Vec<Arc<str>>,
    /// The soonest deadline of any caller on the chain: the callee's waits end there too.
    pub deadline: Option<Instant>,
}

/// Why a call may not be made, as the caller's plugin is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainError {
    /// The callee is already on the chain.
    Cycle(String),
    /// The chain would be deeper than [`MAX_CALL_DEPTH`].
    TooDeep(String),
}

impl ChainError {
    pub fn message(&self) -> &str {
        match self {
            ChainError::Cycle(m) | ChainError::TooDeep(m) => m,
        }
    }

    /// As an ensemble's step fails for it: the server's models are at fault, not the client.
    /// (A method rather than `From`, which would make `?` on an `InferError` ambiguous.)
    pub fn into_infer_error(self) -> InferError {
        InferError::internal(self.message().to_string())
    }
}

impl CallChain {
    /// Whether the request came from a client (no model called it).
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// How many calls led to the request.
    pub fn depth(&self) -> usize {
        self.models.len()
    }

    /// The chain a request from `caller` (which this chain led to) to `callee` carries, with
    /// `deadline` when it is sooner than the inherited one; refused when `callee` is on it
    /// already or the chain would be too deep.
    pub fn enter(&self, caller: &str, callee: &str, deadline: Option<Instant>) -> Result<CallChain, ChainError> {
        let mut models = Vec::with_capacity(self.models.len() + 1);
        models.extend(self.models.iter().cloned());
        models.push(Arc::from(caller));
        if models.iter().any(|m| &**m == callee) {
            return Err(ChainError::Cycle(format!(
                "calling model '{callee}' would make a cycle: {} → {callee} (a model may not call itself, directly \
                 or through others: it would wait for the instance it occupies)",
                Self::render(&models)
            )));
        }
        if models.len() > MAX_CALL_DEPTH {
            return Err(ChainError::TooDeep(format!(
                "calling model '{callee}' would make the call chain deeper than {MAX_CALL_DEPTH}: {} → {callee}",
                Self::render(&models)
            )));
        }
        let deadline = match (self.deadline, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(CallChain { models, deadline })
    }

    fn render(models: &[Arc<str>]) -> String {
        models.iter().map(|m| &**m).collect::<Vec<_>>().join(" → ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_model_on_the_chain_is_a_cycle_and_the_chain_is_named() {
        let ab = CallChain::default().enter("a", "b", None).unwrap();
        assert_eq!(ab.depth(), 1);
        let abc = ab.enter("b", "c", None).unwrap();
        match abc.enter("c", "a", None) {
            Err(ChainError::Cycle(m)) => assert!(m.contains("a → b → c → a"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(CallChain::default().enter("a", "a", None), Err(ChainError::Cycle(_))));
    }

    #[test]
    fn depth_is_limited() {
        let mut chain = CallChain::default();
        for i in 0..MAX_CALL_DEPTH {
            chain = chain.enter(&format!("m{i}"), &format!("m{}", i + 1), None).unwrap();
        }
        let deeper = chain.enter(&format!("m{MAX_CALL_DEPTH}"), "last", None);
        assert!(matches!(deeper, Err(ChainError::TooDeep(_))), "{deeper:?}");
    }

    #[test]
    fn the_sooner_deadline_is_kept() {
        let now = Instant::now();
        let (soon, late) = (now + Duration::from_millis(10), now + Duration::from_secs(10));
        let chain = CallChain::default().enter("a", "b", Some(soon)).unwrap();
        assert_eq!(chain.enter("b", "c", Some(late)).unwrap().deadline, Some(soon));
        assert_eq!(CallChain::default().enter("a", "b", None).unwrap().deadline, None);
    }
}
