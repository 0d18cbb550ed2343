//! The class labels of a model's outputs (`label_filename` in an output's configuration), read once
//! at load, for the classification extension: a requested output's top classes are answered as
//! `value:index:label`, the label being line `index` of the output's file.
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::load_error::LoadError;

/// Each output's labels, line by line; outputs without a label file have none.
#[derive(Debug, Default)]
pub struct OutputLabels {
    by_output: HashMap<String, Arc<[String]>>,
}

impl OutputLabels {
    /// Reads the label file of every output that names one, relative to the model's folder `dir`
    /// (not a version folder), as tritonserver does: a path that leaves the folder is refused, an
    /// unreadable file fails the load, each with tritonserver's words.
    pub fn load(config: &ModelConfig, dir: &Path) -> Result<Self, LoadError> {
        let mut by_output = HashMap::new();
        for output in config.output.iter().filter(|o| !o.label_filename.is_empty()) {
            // tritonserver joins the two with a separator (an absolute name stays under the folder).
            let joined = format!("{}/{}", dir.display(), output.label_filename);
            if !lexically_normal(Path::new(&joined)).starts_with(lexically_normal(dir)) {
                return Err(LoadError::LabelFileOutside {
                    path: joined,
                    output: output.name.clone(),
                    model: config.name.clone(),
                });
            }
            let bytes =
                std::fs::read(&joined).map_err(|source| LoadError::LabelFileUnreadable { path: joined, source })?;
            by_output.insert(output.name.clone(), lines(&bytes).into());
        }
        Ok(OutputLabels { by_output })
    }

    /// The labels of the outputs that have none of their own, from `from` (another model's), under
    /// the names in `renamed` (`(their output, this model's output)`): an ensemble's output takes
    /// the labels of the step output it is mapped from, as tritonserver's ensembles do.
    pub fn inherit<'a>(&mut self, from: &OutputLabels, renamed: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (theirs, ours) in renamed {
            if let (false, Some(labels)) = (self.by_output.contains_key(ours), from.by_output.get(theirs)) {
                self.by_output.insert(ours.to_string(), labels.clone());
            }
        }
    }

    /// The label of class `index` of `output`: `None` past the file's end, and for an empty line
    /// (tritonserver then answers `value:index` without a label).
    pub fn get(&self, output: &str, index: usize) -> Option<&str> {
        self.by_output.get(output)?.get(index).map(String::as_str).filter(|l| !l.is_empty())
    }
}

/// The file's lines as `std::getline` reads them: split at `\n` (a `\r` stays), no line after a
/// final newline; bytes that are not UTF-8 replaced.
fn lines(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines
}

/// `path` with `.` and `..` resolved without touching the file system.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::ModelOutput;

    fn config(outputs: &[(&str, &str)]) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            output: outputs
                .iter()
                .map(|(n, f)| ModelOutput { name: n.to_string(), label_filename: f.to_string(), ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn lines_are_read_as_getline_reads_them() {
        assert_eq!(lines(b"a\n\nb\r\nc"), ["a", "", "b\r", "c"]);
        assert_eq!(lines(b"a\nb\n"), ["a", "b"]);
        assert!(lines(b"").is_empty());
    }

    #[test]
    fn labels_load_from_the_model_folder_and_stay_inside_it() {
        let dir = std::env::temp_dir().join(format!("nereus-labels-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("labels.txt"), "cat\n\ndog\n").unwrap();
        std::fs::write(dir.join("sub/more.txt"), "x\n").unwrap();
        let labels =
            OutputLabels::load(&config(&[("A", "labels.txt"), ("B", "sub/../sub/more.txt"), ("C", "")]), &dir).unwrap();
        assert_eq!((labels.get("A", 0), labels.get("A", 1), labels.get("A", 2)), (Some("cat"), None, Some("dog")));
        assert_eq!((labels.get("A", 3), labels.get("B", 0), labels.get("C", 0)), (None, Some("x"), None));

        let e = OutputLabels::load(&config(&[("A", "../x.txt")]), &dir).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "label file path '{}/../x.txt' for output 'A' in model 'm' is outside model directory",
                dir.display()
            )
        );
        let e = OutputLabels::load(&config(&[("A", "nope.txt")]), &dir).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("failed to open text file for read {}/nope.txt: No such file or directory", dir.display())
        );

        let mut ensemble = OutputLabels::load(&config(&[("OUT", "sub/more.txt")]), &dir).unwrap();
        ensemble.inherit(&labels, [("A", "OUT"), ("A", "OTHER"), ("C", "THIRD")]);
        assert_eq!(
            (ensemble.get("OUT", 0), ensemble.get("OTHER", 0), ensemble.get("THIRD", 0)),
            (Some("x"), Some("cat"), None)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
