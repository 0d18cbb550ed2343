//! Triton mode's trace file, written as tritonserver writes it: `<file>` is one JSON array that
//! grows as settings hand over their collected traces (opened at the first write, closed with `]`
//! at shutdown); `<file>.<n>` are complete arrays written at once, one per batch of
//! `log_frequency` traces (or when `trace_count` runs out). A thread of its own does the writing,
//! so no request thread waits for the disk.
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

enum Op {
    /// Traces (JSON records, comma-separated): to the next indexed file, or appended to the file.
    Save { text: String, indexed: bool },
    /// Close the file and stop; `done` is told when that is over.
    Close { done: Sender<()> },
}

/// Where settings hand their collected traces; cheap to clone.
#[derive(Clone, Debug)]
pub struct FileSink {
    ops: Sender<Op>,
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Save { .. } => "Save",
            Op::Close { .. } => "Close",
        })
    }
}

impl FileSink {
    /// Starts the writer of `path` (nothing is created before the first traces arrive).
    pub fn start(path: PathBuf) -> std::io::Result<FileSink> {
        let (ops, rx) = crossbeam_channel::unbounded();
        std::thread::Builder::new().name("nereus-trace-file".into()).spawn(move || write_loop(path, rx))?;
        Ok(FileSink { ops })
    }

    /// Hands over collected traces.
    pub fn save(&self, text: String, indexed: bool) {
        // After shutdown nobody writes them; nothing is lost that could have been kept.
        let _ = self.ops.send(Op::Save { text, indexed });
    }

    /// Writes what was handed over, closes the file and stops the writer; waits at most `wait`.
    pub fn close(&self, wait: Duration) {
        let (done, finished) = crossbeam_channel::bounded(1);
        if self.ops.send(Op::Close { done }).is_ok() && finished.recv_timeout(wait).is_err() {
            tracing::warn!("the trace file was not closed within {} ms", wait.as_millis());
        }
    }
}

fn write_loop(path: PathBuf, ops: Receiver<Op>) {
    let mut file: Option<File> = None;
    let mut next_index = 0u64;
    let report = |e: std::io::Error| tracing::error!("failed creating trace file: {e}");
    while let Ok(op) = ops.recv() {
        match op {
            Op::Save { text, indexed: true } => {
                let mut name = path.clone().into_os_string();
                name.push(format!(".{next_index}"));
                next_index += 1;
                let written = File::create(&name).and_then(|mut f| write!(f, "[{text}]"));
                if let Err(e) = written {
                    report(e);
                }
            }
            Op::Save { text, indexed: false } => {
                let written = match &mut file {
                    Some(f) => write!(f, ",{text}"),
                    None => File::create(&path).and_then(|mut f| {
                        write!(f, "[{text}")?;
                        file = Some(f);
                        Ok(())
                    }),
                };
                if let Err(e) = written {
                    report(e);
                }
            }
            Op::Close { done } => {
                if let Some(mut f) = file.take()
                    && let Err(e) = f.write_all(b"]")
                {
                    report(e);
                }
                let _ = done.send(());
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_batches_are_whole_arrays_and_the_file_grows_until_closed() {
        let dir = std::env::temp_dir().join(format!("nereus-trace-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.json");
        let sink = FileSink::start(path.clone()).unwrap();
        sink.save(r#"{"id":1}"#.into(), true);
        sink.save(r#"{"id":2}"#.into(), false);
        sink.save(r#"{"id":3},{"id":4}"#.into(), false);
        sink.save(r#"{"id":5}"#.into(), true);
        sink.close(Duration::from_secs(10));
        let read = |p: &std::path::Path| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        assert_eq!(read(&dir.join("trace.json.0")), serde_json::json!([{"id": 1}]));
        assert_eq!(read(&dir.join("trace.json.1")), serde_json::json!([{"id": 5}]));
        assert_eq!(read(&path), serde_json::json!([{"id": 2}, {"id": 3}, {"id": 4}]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
