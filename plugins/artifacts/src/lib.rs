//! The plugin components built from `plugins/`, by path (for tests that lay out model repositories)
//! and, for the bundled examples, by bytes (for the `nereus` binary's built-in backends).
include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
