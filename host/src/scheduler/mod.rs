//! Schedulers: how a model's requests reach its instances. Each instance runs on its own worker
//! thread and executes one batch at a time; schedulers decide what goes into each batch.
mod default;

pub use default::DefaultScheduler;
