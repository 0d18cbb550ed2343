//! Why a model, or one of its versions, cannot be loaded: each way a load fails, typed. Its
//! `Display` is the reason the repository index reports for the UNAVAILABLE model (and the log
//! says), worded as before these errors were typed. Where a variant keeps the underlying error as
//! its `source`, the message already includes that error's own words, as tritonserver's reasons
//! do: print the `Display`, not the chain.
//!
//! A leaf of the crate: it names only the configuration's errors, the client-facing error and the
//! libraries' own, so that every module on the load path (repository, backends, the sequence
//! batcher's rules, ensembles) can return it without an import cycle; which is also why the errors
//! of those modules are defined here rather than next to them.
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{ConfigError, ParseError};
use crate::error::InferError;
use crate::tensor::DataType;

/// Why a model (or a version of it) is UNAVAILABLE.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The same model name appears in more than one repository (tritonserver's reason, word for
    /// word, as the repository index shows it; [`LoadError::folders`] names the folders).
    #[error("model appears in two or more repositories")]
    Duplicate { dirs: Vec<PathBuf> },
    /// The model's objects in a remote repository could not be copied (the words name the object
    /// and the cause); nothing of it was loaded.
    #[error("{0}")]
    Remote(String),
    /// A file the load needs (`config.pbtxt`, a backend's component) cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// `config.pbtxt` does not parse.
    #[error("config.pbtxt {0}")]
    Parse(#[source] ParseError),
    /// The configuration breaks one of Triton's rules; `line` is where the offending field is, when
    /// it is in the file (an auto-completed field is not).
    #[error("invalid config.pbtxt: {}", located(*.line, .source))]
    Config {
        line: Option<usize>,
        #[source]
        source: ConfigError,
    },
    /// The `sequence_batching` settings are unusable.
    #[error("sequence_batching: {0}")]
    Sequence(#[source] SequenceError),

    /// An output's `label_filename` leaves the model's folder (tritonserver's words).
    #[error("label file path '{path}' for output '{output}' in model '{model}' is outside model directory")]
    LabelFileOutside { path: String, output: String, model: String },
    /// An output's label file cannot be read (tritonserver's words, the system's reason).
    #[error("failed to open text file for read {path}: {}", os_words(.source))]
    LabelFileUnreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// The version policy selects no version.
    #[error("at least one version must be available under the version policy of the model")]
    NoVersion,

    /// The configuration names no backend.
    #[error("the configuration names no 'backend' (or 'platform')")]
    NoBackend,
    /// An ensemble was asked for a backend (it runs other models, not one of its own).
    #[error("an ensemble has no backend")]
    EnsembleBackend,
    /// A `platform` Triton does not know.
    #[error("unknown platform '{0}'")]
    UnknownPlatform(String),
    /// A framework backend of Triton's that Nereus does not run (and no component of that name).
    #[error("backend '{backend}' is not supported by Nereus (no '{backend}.wasm' component was found either)")]
    BackendUnsupported { backend: String },
    /// No component for the backend in any of the places looked at (tritonserver's words, then
    /// the places).
    #[error(
        "unable to find backend library for backend '{backend}', try specifying runtime on the model \
         configuration. Looked for {}",
        paths(.looked)
    )]
    BackendNotFound { backend: String, looked: Vec<PathBuf> },
    /// The configuration's `runtime` names a file that is not in any of the places looked at.
    #[error("unable to find backend library '{runtime}' for model '{model}' (looked for {})", paths(.looked))]
    RuntimeNotFound { runtime: String, model: String, looked: Vec<PathBuf> },
    /// The configuration's `runtime` reaches outside the folders a backend is looked for in.
    #[error("backend library name '{runtime}' escapes backend directory")]
    RuntimeEscapes { runtime: String },
    /// The backend's file is not a component of the `nereus:backend` world.
    #[error("backend '{backend}' is not a usable nereus:backend component: {error:#}")]
    NotAComponent {
        backend: String,
        #[source]
        error: wasmtime::Error,
    },

    /// The sandbox policy in the configuration's `parameters` is malformed or out of range.
    #[error(transparent)]
    SandboxPolicy(ConfigError),
    /// More instances than the sandbox policy allows.
    #[error(
        "instance_group asks for {requested} instances; the sandbox policy allows at most {allowed} \
         (sandbox.max_instances)"
    )]
    TooManyInstances { requested: usize, allowed: u64 },
    /// The model asks more of its sandboxes than the operator allows, or the server's sandbox
    /// budget has no room for it (the reason names the parameter and the flag).
    #[error("{0}")]
    OverSandboxLimit(String),
    /// The host's own copy of a sandboxed backend failed its `initialize-backend`.
    #[error("backend '{backend}' failed to initialize: {source}")]
    BackendInit {
        backend: String,
        #[source]
        source: PluginError,
    },
    /// A model's or an instance's sandbox failed to start or to initialise.
    #[error(transparent)]
    Plugin(#[from] PluginError),

    /// The ONNX Runtime backend could not load the model.
    #[error(transparent)]
    Onnx(#[from] OnnxError),

    /// The ensemble's steps do not make a pipeline.
    #[error(transparent)]
    Ensemble(#[from] EnsembleError),

    /// The version was unloaded on request (tritonserver's reason, word for word).
    #[error("unloaded")]
    Unloaded,
    /// A load request's `config` parameter is not a model configuration in JSON.
    #[error("Invalid config override: {0}")]
    ConfigOverride(#[source] crate::config::JsonError),
    /// A load request's `file:` parameters cannot be laid out as a model folder.
    #[error("{0}")]
    FileOverride(String),
}

/// How a sandboxed plugin's lifecycle call failed during a load.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PluginError {
    /// The plugin's initialiser returned this error.
    #[error("{0}")]
    Returned(String),
    /// The sandbox faulted (a trap, its deadline, its memory cap) or could not be created; the
    /// message names the sandbox and the limit.
    #[error("{0}")]
    Fault(String),
}

/// Why ONNX Runtime itself cannot be used (found once per process, then the same for every model).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    /// No library was named.
    #[error(
        "no ONNX Runtime library: pass --onnxruntime-library or set NEREUS_ONNXRUNTIME_LIB \
         (scripts/setup-onnxruntime.sh installs one)"
    )]
    NoLibrary,
    /// The named library is not there; the message says what installs it.
    #[error(
        "the ONNX Runtime library {} does not exist: scripts/setup-onnxruntime.sh (in the Nereus \
         repository) installs the CPU one there, or pass --onnxruntime-library PATH",
        .path.display()
    )]
    LibraryMissing { path: PathBuf },
    /// The library did not load.
    #[error("cannot load ONNX Runtime from {}: {error}", .path.display())]
    LibraryUnloadable {
        path: PathBuf,
        #[source]
        error: Arc<ort::LoadDynamicError>,
    },
    /// The library loaded but its environment did not start.
    #[error("cannot start ONNX Runtime: {0}")]
    Start(#[source] Arc<ort::Error>),
}

/// Why the ONNX Runtime backend cannot load a model.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Auto-complete could not open the model.
    #[error("cannot read {} to complete its configuration: {error}", .path.display())]
    AutocompleteUnreadable {
        path: PathBuf,
        #[source]
        error: ort::Error,
    },
    /// Auto-complete found an input or output of an element type Nereus has no datatype for.
    #[error("'{name}' has element type {element:?}, which Nereus cannot serve")]
    UnservableElement { name: String, element: ort::value::TensorElementType },
    /// Auto-complete found an input or output that is not a tensor.
    #[error("'{name}' is a {value:?}, not a tensor")]
    NotATensor { name: String, value: Box<ort::value::ValueType> },
    #[error("model file {} does not exist", .0.display())]
    ModelFileMissing(PathBuf),
    /// `intra_op_thread_count` or `inter_op_thread_count` is not a count.
    #[error("parameter '{0}' must be a non-negative integer")]
    ThreadCount(String),
    /// A CUDA execution provider option of the configuration is unusable.
    #[error(transparent)]
    Cuda(#[from] CudaOptionError),
    /// An instance's session could not be created.
    #[error("instance '{instance}': {source}")]
    Instance {
        instance: String,
        #[source]
        source: InstanceError,
    },
    /// Auto-complete found a model that does not batch, configured with a `max_batch_size`
    /// (tritonserver's ONNX Runtime backend's words).
    #[error(
        "autofill failed for model '{model}': model does not support batching while non-zero max_batch_size is \
         specified"
    )]
    AutofillBatching { model: String },
    /// The configuration's inputs or outputs do not match the model's (the message is
    /// tritonserver's ONNX Runtime backend's: counts, datatypes, dims).
    #[error("{0}")]
    Mismatch(String),
    /// The configuration names an input the model does not have (tritonserver's ONNX Runtime
    /// backend's words).
    #[error("unexpected inference input '{input}', allowed inputs are: {}", .available.join(", "))]
    NoSuchInput { input: String, available: Vec<String> },
    /// The configuration names an output the model does not have.
    #[error("unexpected inference output '{output}', allowed outputs are: {}", .available.join(", "))]
    NoSuchOutput { output: String, available: Vec<String> },
}

/// A CUDA execution provider option the configuration sets wrongly (see `backend::onnx::gpu`).
#[derive(Debug, thiserror::Error)]
pub enum CudaOptionError {
    #[error("parameter 'cudnn_conv_algo_search' must be 0, 1 or 2, not '{0}'")]
    ConvAlgoSearch(String),
    #[error("parameter 'gpu_mem_limit' must be a byte count, not '{0}'")]
    GpuMemLimit(String),
    #[error("parameter 'arena_extend_strategy' must be 0 or 1, not '{0}'")]
    ArenaExtendStrategy(String),
    #[error(
        "gpu_execution_accelerator '{0}' is not supported (Nereus runs ONNX Runtime's CUDA execution provider: \
         name it \"cuda\")"
    )]
    Accelerator(String),
    /// A parameter Nereus sets for each instance itself.
    #[error("the cuda accelerator parameter '{0}' is set by Nereus per instance")]
    Reserved(String),
    /// The key is shown escaped.
    #[error("the cuda accelerator parameter '{}' holds a NUL byte", .0.escape_debug())]
    NulByte(String),
}

/// Why one ONNX Runtime instance could not be created.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// ONNX Runtime refused a session option (or the memory description of a GPU instance).
    #[error("{0}")]
    Session(#[source] ort::Error),
    /// A `KIND_GPU` instance on a device id that is not one.
    #[error("GPU {0}")]
    Device(i32),
    /// The instance's CUDA stream could not be created.
    #[error("{0}")]
    Stream(String),
    #[error("the CUDA execution provider is unavailable: {0}")]
    CudaProvider(#[source] ort::Error),
    /// ONNX Runtime could not load the model file.
    #[error("cannot load {}: {error}", .path.display())]
    Model {
        path: PathBuf,
        #[source]
        error: ort::Error,
    },
    #[error("no CUDA allocator on GPU {device}: {error}")]
    Allocator {
        device: i32,
        #[source]
        error: ort::Error,
    },
}

/// Why an ensemble's steps do not make a pipeline (the checks Triton makes at load).
#[derive(Debug, thiserror::Error)]
pub enum EnsembleError {
    /// The ensemble does not fit its composing models (tritonserver's words: see
    /// `ensemble::composition`).
    #[error("{0}")]
    Composition(String),
    #[error("missing ensemble_scheduling")]
    NoScheduling,
    /// An ensemble input or output (`"input"`, `"output"`) has no valid datatype.
    #[error("invalid {0} datatype")]
    Datatype(&'static str),
    /// A step is at fault.
    #[error("step {step} (model '{model}'): {problem}")]
    Step {
        step: usize,
        model: String,
        #[source]
        problem: Box<StepError>,
    },
    /// A composing model stopped answering between the checks (it was found a moment before).
    #[error(transparent)]
    Model(InferError),
    #[error("steps {} depend on each other in a cycle", numbers(.0))]
    Cycle(Vec<usize>),
    #[error("ensemble output '{0}' is not produced by any step")]
    OutputNotProduced(String),
    #[error("ensemble output '{output}' is {declared} but a step produces {produced}")]
    OutputDatatype { output: String, declared: DataType, produced: DataType },
}

/// What is wrong with one step of an ensemble.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("an ensemble cannot contain itself")]
    ContainsItself,
    /// The composing model (version) is unknown or unavailable; the message is the resolver's.
    #[error(transparent)]
    Model(InferError),
    #[error("the model has no input '{0}'")]
    NoInput(String),
    #[error("the model's input '{0}' is not mapped")]
    Unmapped(String),
    #[error("the model has no output '{0}'")]
    NoOutput(String),
    /// Two producers of one tensor; `by` is the earlier one's step (`None`: an ensemble input).
    #[error("tensor '{tensor}' is already produced by {}", producer(*.by))]
    ProducedTwice { tensor: String, by: Option<usize> },
    #[error("input '{input}' consumes tensor '{tensor}', which nothing produces")]
    NotProduced { input: String, tensor: String },
    #[error("tensor '{tensor}' is {produced} but input '{input}' expects {expected}")]
    Datatype { tensor: String, input: String, produced: DataType, expected: DataType },
}

/// Why a `sequence_batching { … }` configuration is unusable (see `scheduler::sequence::rules`).
#[derive(Debug, thiserror::Error)]
pub enum SequenceError {
    #[error("sequence_batching.oldest.max_candidate_sequences must be positive")]
    CandidateSequences,
    #[error("sequence_batching.oldest.preferred_batch_size {0} must be between 1 and max_batch_size")]
    PreferredBatchSize(usize),
    #[error("control input '{0}' has the name of a model input")]
    ControlNameTaken(String),
    #[error("control input '{0}' must have exactly one control")]
    ControlCount(String),
    #[error("control input '{0}': unknown kind")]
    ControlKind(String),
    #[error(
        "control input '{0}': CONTROL_SEQUENCE_CORRID needs data_type TYPE_UINT64, TYPE_INT64, \
         TYPE_UINT32, TYPE_INT32 or TYPE_STRING"
    )]
    CorridDatatype(String),
    #[error("more than one CONTROL_SEQUENCE_CORRID control")]
    CorridTwice,
    #[error(
        "control input '{0}' must give exactly one of int32_false_true, fp32_false_true or \
         bool_false_true, with two values"
    )]
    ControlValues(String),
    /// Two controls of one kind (the kind's name as the configuration spells it).
    #[error("more than one control of kind {0}")]
    ControlTwice(&'static str),
    #[error("state '{0}' needs a valid data_type")]
    StateDatatype(String),
    #[error("a state needs both input_name and output_name")]
    StateNames,
    #[error("state input '{0}' has the name of a model input")]
    StateNameTaken(String),
    #[error("initial_state of state '{0}' must have fixed dims")]
    InitialDims(String),
    /// A state whose initial value would be larger than the host allows (or than it can count).
    #[error("state '{name}' with dims {dims:?} is larger than the {} MiB a sequence state may be", .limit >> 20)]
    StateTooLarge { name: String, dims: Vec<i64>, limit: u64 },
    #[error("initial_state of state '{0}' needs zero_data or data_file")]
    InitialData(String),
    #[error("state '{0}' may have only one initial_state")]
    InitialStates(String),
    /// A `data_file` that reaches outside the model's `initial_state/` folder.
    #[error("initial_state data_file '{0}' must be a file under initial_state/")]
    DataFilePath(String),
    #[error("cannot read {}: {source}", .path.display())]
    DataFileUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "initial_state data_file {} holds {size} bytes, but dims {dims:?} of {} need {expected}",
        .path.display(),
        .datatype.wire_name()
    )]
    DataFileSize { path: PathBuf, size: usize, dims: Vec<i64>, datatype: DataType, expected: usize },
}

impl LoadError {
    /// The name of the status code tritonserver gives a failure of this kind, as its log lines
    /// write it before the message (`failed to load 'm' version 1: Invalid argument: …`): what
    /// the model's files or configuration got wrong is an invalid argument; what went wrong in
    /// the server or a sandbox, internal.
    pub fn status_name(&self) -> &'static str {
        match self {
            LoadError::Remote(_)
            | LoadError::Unreadable { .. }
            | LoadError::NotAComponent { .. }
            | LoadError::BackendInit { .. }
            | LoadError::Plugin(_)
            | LoadError::OverSandboxLimit(_)
            | LoadError::LabelFileUnreadable { .. }
            | LoadError::Onnx(OnnxError::Runtime(_) | OnnxError::Instance { .. }) => "Internal",
            LoadError::LabelFileOutside { .. } => "Unsupported",
            _ => "Invalid argument",
        }
    }

    /// The folders a reason concerns, for the log (` (in /a/m, /b/m)`), or nothing.
    pub fn folders(&self) -> String {
        match self {
            LoadError::Duplicate { dirs } => format!(" (in {})", paths(dirs)),
            _ => String::new(),
        }
    }
}

/// An I/O error as `strerror` words it, without Rust's ` (os error N)`.
fn os_words(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(at) => s[..at].to_string(),
        None => s,
    }
}

fn paths(list: &[PathBuf]) -> String {
    list.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn numbers(list: &[usize]) -> String {
    list.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
}

fn located(line: Option<usize>, e: &ConfigError) -> String {
    match line {
        Some(line) => format!("line {line}: {e}"),
        None => e.to_string(),
    }
}

fn producer(step: Option<usize>) -> String {
    match step {
        Some(p) => format!("step {p}"),
        None => "an ensemble input".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_before() {
        let e = LoadError::Config { line: Some(3), source: ConfigError::new("'dims' must be specified") };
        assert_eq!(e.to_string(), "invalid config.pbtxt: line 3: 'dims' must be specified");
        let e = LoadError::Config { line: None, source: ConfigError::new("bad") };
        assert_eq!(e.to_string(), "invalid config.pbtxt: bad");
        let e = LoadError::Duplicate { dirs: vec!["/a/m".into(), "/b/m".into()] };
        assert_eq!(e.to_string(), "model appears in two or more repositories");
        assert_eq!(e.folders(), " (in /a/m, /b/m)");
        let e =
            LoadError::BackendNotFound { backend: "x".into(), looked: vec!["/m/1/x.wasm".into(), "/m/x.wasm".into()] };
        assert_eq!(
            e.to_string(),
            "unable to find backend library for backend 'x', try specifying runtime on the model configuration. \
             Looked for /m/1/x.wasm, /m/x.wasm"
        );
        let e = LoadError::BackendUnsupported { backend: "pytorch".into() };
        assert_eq!(
            e.to_string(),
            "backend 'pytorch' is not supported by Nereus (no 'pytorch.wasm' component was found either)"
        );
        let e = LoadError::from(EnsembleError::Step {
            step: 1,
            model: "m".into(),
            problem: Box::new(StepError::ProducedTwice { tensor: "t".into(), by: None }),
        });
        assert_eq!(e.to_string(), "step 1 (model 'm'): tensor 't' is already produced by an ensemble input");
        assert_eq!(EnsembleError::Cycle(vec![0, 2]).to_string(), "steps 0, 2 depend on each other in a cycle");
        let e = LoadError::from(OnnxError::Runtime(RuntimeError::LibraryMissing { path: "/x/lib.so".into() }));
        assert!(
            e.to_string()
                .starts_with("the ONNX Runtime library /x/lib.so does not exist: scripts/setup-onnxruntime.sh")
        );
        let e = LoadError::BackendInit { backend: "b".into(), source: PluginError::Returned("no".into()) };
        assert_eq!(e.to_string(), "backend 'b' failed to initialize: no");
        let e = LoadError::TooManyInstances { requested: 3, allowed: 2 };
        assert_eq!(
            e.to_string(),
            "instance_group asks for 3 instances; the sandbox policy allows at most 2 (sandbox.max_instances)"
        );
        assert_eq!(
            CudaOptionError::Accelerator("tensorrt".into()).to_string(),
            "gpu_execution_accelerator 'tensorrt' is not supported (Nereus runs ONNX Runtime's CUDA execution \
             provider: name it \"cuda\")"
        );
        assert_eq!(
            RuntimeError::NoLibrary.to_string(),
            "no ONNX Runtime library: pass --onnxruntime-library or set NEREUS_ONNXRUNTIME_LIB \
             (scripts/setup-onnxruntime.sh installs one)"
        );
        assert_eq!(
            SequenceError::CorridDatatype("C".into()).to_string(),
            "control input 'C': CONTROL_SEQUENCE_CORRID needs data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, \
             TYPE_INT32 or TYPE_STRING"
        );
        assert_eq!(
            LoadError::Sequence(SequenceError::ControlValues("S".into())).to_string(),
            "sequence_batching: control input 'S' must give exactly one of int32_false_true, fp32_false_true or \
             bool_false_true, with two values"
        );
    }
}
