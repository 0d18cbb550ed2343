//! The ONNX Runtime backend (backend `onnxruntime`, platform `onnxruntime_onnx`), native in the
//! host. ONNX Runtime is loaded at run time from a shared library (never downloaded at build time):
//! `--onnxruntime-library`, else `NEREUS_ONNXRUNTIME_LIB`, else the one `scripts/setup-onnxruntime.sh`
//! installs. Without it, ONNX models are UNAVAILABLE with the reason and everything else serves.
//!
//! Each instance owns an ORT session. A batch's inputs are gathered along the batch dimension
//! with one copy ([`super::batch`]), run once, and the outputs split back per request without
//! copying. Session options follow Triton's ORT backend: `parameters` `intra_op_thread_count` and
//! `inter_op_thread_count`, and `optimization { graph { level } }` (-1 disables graph
//! optimisations, 1 enables the basic ones, anything else all of them).
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use ort::session::builder::GraphOptimizationLevel;
use ort::session::{OutputSelector, RunOptions, Session, SessionInputValue};

pub mod autocomplete;
mod check;
mod gpu;
mod placed;
mod values;

use gpu::GpuIo;
use values::{from_output, to_input};

use super::batch::{Gathered, gather, scatter};
use super::ragged::{BatchIo, scatter_with_input_shape};
use super::{
    BackendFactory, BackendInstance, ExecutionThread, InstanceDesc, InstanceKind, LoadedVersion, ModelFolder,
    VersionLoad,
};
use crate::config::ModelConfig;
use crate::config::schema::model_config::SchedulingChoice;
use crate::error::InferError;
use crate::gpu::InstanceStream;
use crate::load_error::{InstanceError, LoadError, OnnxError, RuntimeError};
use crate::request::{InferenceResponse, Job, Tensor};
use crate::stats::ExecutionTimes;
use crate::validate::{IoSpec, check_output_of_len};

/// Where `scripts/setup-onnxruntime.sh` installs the library, under the user's cache.
pub fn default_library() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(PathBuf::from(home).join(".cache/nereus/onnxruntime/libonnxruntime.so"))
}

static RUNTIME: OnceLock<Result<ort::environment::Environment, RuntimeError>> = OnceLock::new();

/// Loads ONNX Runtime once per process; later calls return the first outcome.
pub(crate) fn runtime(library: Option<&Path>) -> Result<&'static ort::environment::Environment, RuntimeError> {
    let outcome = RUNTIME.get_or_init(|| {
        let path = library.ok_or(RuntimeError::NoLibrary)?;
        if !path.is_file() {
            return Err(RuntimeError::LibraryMissing { path: path.to_path_buf() });
        }
        let builder = ort::init_from(path)
            .map_err(|e| RuntimeError::LibraryUnloadable { path: path.to_path_buf(), error: Arc::new(e) })?;
        let environment = builder.with_name("nereus").build().map_err(|e| RuntimeError::Start(Arc::new(e)))?;
        tracing::info!("initialized backend 'onnxruntime' (ONNX Runtime from {})", path.display());
        Ok(environment)
    });
    outcome.as_ref().map_err(Clone::clone)
}

/// Whether ONNX Runtime loads from `library` and offers its CUDA execution provider (probed once):
/// the PyPI `onnxruntime-gpu` library does, the CPU `onnxruntime` one does not.
pub fn cuda_available(library: Option<&Path>) -> bool {
    use ort::ep::ExecutionProvider;
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if runtime(library).is_err() {
            return false;
        }
        let available = ort::ep::CUDA::is_available();
        tracing::info!("ONNX Runtime's CUDA execution provider available: {available:?}");
        available.unwrap_or(false)
    })
}

/// The `onnxruntime` backend (platform `onnxruntime_onnx`).
pub struct OnnxBackend {
    /// The ONNX Runtime library (none: ONNX models are UNAVAILABLE, saying how to get one).
    library: Option<PathBuf>,
    /// Complete configurations from the models (`--disable-auto-complete-config` turns it off).
    autocomplete: bool,
}

impl OnnxBackend {
    pub fn new(library: Option<PathBuf>, autocomplete: bool) -> Self {
        OnnxBackend { library, autocomplete }
    }

    /// The model file of `version`: `default_model_filename`, else `model.onnx`.
    fn model_file(config: &ModelConfig, dir: &Path, version: i64) -> PathBuf {
        let file = if config.default_model_filename.is_empty() { "model.onnx" } else { &config.default_model_filename };
        dir.join(version.to_string()).join(file)
    }
}

impl BackendFactory for OnnxBackend {
    fn autocomplete(&self, config: &mut ModelConfig, folder: &ModelFolder<'_>) -> Result<(), LoadError> {
        let Some(version) = folder.version else { return Ok(()) };
        let file = Self::model_file(config, folder.dir, version);
        if self.autocomplete && file.is_file() {
            autocomplete::complete(config, &file, self.library.as_deref())?;
        }
        Ok(())
    }

    /// KIND_AUTO means the GPUs only with ONNX Runtime's CUDA execution provider: a CPU-only
    /// library keeps ONNX models on the CPU, where they still work.
    fn uses_gpus(&self) -> bool {
        cuda_available(self.library.as_deref())
    }

    fn load(&self, v: &VersionLoad<'_>) -> Result<LoadedVersion, LoadError> {
        let file = Self::model_file(v.config, v.model_dir, v.version);
        let instances = load_instances(v.config, v.version, &file, self.library.as_deref(), v.instances, v.io.clone())?;
        Ok(LoadedVersion { instances, teardown: None })
    }

    /// The ONNX Runtime library models load, and auto-complete as tritonserver's backend table
    /// shows its command-line settings.
    fn describe(&self, _backend: &str, _model_dir: &Path, _version: i64) -> super::BackendSummary {
        let path =
            self.library.as_ref().map_or_else(|| "(no ONNX Runtime library)".into(), |p| p.display().to_string());
        let config = serde_json::json!({"cmdline": {"auto-complete-config": self.autocomplete.to_string()}});
        super::BackendSummary { path, config: config.to_string() }
    }
}

/// Creates one session per instance for `model_file`.
fn load_instances(
    config: &ModelConfig,
    version: i64,
    model_file: &Path,
    library: Option<&Path>,
    instances: &[InstanceDesc],
    io: Arc<IoSpec>,
) -> Result<Vec<Box<dyn BackendInstance>>, OnnxError> {
    let environment = runtime(library)?;
    if !model_file.is_file() {
        return Err(OnnxError::ModelFileMissing(model_file.to_path_buf()));
    }
    let threads = |key: &str| -> Result<Option<usize>, OnnxError> {
        match config.parameters.get(key) {
            None => Ok(None),
            Some(p) => p.string_value.trim().parse().map(Some).map_err(|_| OnnxError::ThreadCount(key.to_string())),
        }
    };
    let (intra, inter) = (threads("intra_op_thread_count")?, threads("inter_op_thread_count")?);
    let level = match config.optimization.as_ref().and_then(|o| o.graph.as_ref()).map(|g| g.level) {
        Some(-1) => GraphOptimizationLevel::Disable,
        Some(1) => GraphOptimizationLevel::Level1,
        _ => GraphOptimizationLevel::All,
    };
    let cuda_options =
        if instances.iter().any(|d| d.kind == InstanceKind::Gpu) { gpu::cuda_options(config)? } else { Vec::new() };
    let ragged: Vec<String> = config.input.iter().filter(|i| i.allow_ragged_batch).map(|i| i.name.clone()).collect();
    let batch_io = BatchIo::new(config);
    let state_outputs: Vec<String> = match &config.scheduling_choice {
        Some(SchedulingChoice::SequenceBatching(sb)) => sb.state.iter().map(|st| st.output_name.clone()).collect(),
        _ => Vec::new(),
    };
    let mut out: Vec<Box<dyn BackendInstance>> = Vec::with_capacity(instances.len());
    for desc in instances {
        let fail = |source: InstanceError| OnnxError::Instance { instance: desc.name.clone(), source };
        let mut builder = Session::builder(environment).map_err(|e| fail(InstanceError::Session(e)))?;
        let stream = match desc.kind {
            InstanceKind::Gpu => {
                let device =
                    usize::try_from(desc.device_id).map_err(|_| fail(InstanceError::Device(desc.device_id)))?;
                let stream = InstanceStream::new(device).map_err(|e| fail(InstanceError::Stream(e)))?;
                builder = builder
                    .with_execution_providers([gpu::provider(&stream, desc.device_id, &cuda_options)])
                    .map_err(|e| fail(InstanceError::CudaProvider(detach(e))))?;
                Some(stream)
            }
            InstanceKind::Cpu | InstanceKind::Model => None,
        };
        if let Some(n) = intra {
            builder = builder.with_intra_threads(n).map_err(|e| fail(InstanceError::Session(detach(e))))?;
        }
        if let Some(n) = inter {
            builder = builder.with_inter_threads(n).map_err(|e| fail(InstanceError::Session(detach(e))))?;
        }
        builder = builder.with_optimization_level(level).map_err(|e| fail(InstanceError::Session(detach(e))))?;
        let session = builder
            .commit_from_file(model_file)
            .map_err(|error| fail(InstanceError::Model { path: model_file.to_path_buf(), error }))?;
        // Once per version: every instance has the same model.
        if out.is_empty() {
            let inputs = autocomplete::described(session.inputs().iter().map(|o| (o.name(), o.dtype())));
            let initializers = session.overridable_initializers();
            let overridable = autocomplete::described(initializers.iter().map(|i| (i.name(), i.dtype())));
            let outputs = autocomplete::described(session.outputs().iter().map(|o| (o.name(), o.dtype())));
            check::check_io(config, &inputs, &overridable, &outputs)?;
        }
        let gpu = match stream {
            Some(stream) => Some(GpuIo::new(&session, stream, desc.device_id).map_err(fail)?),
            None => None,
        };
        out.push(Box::new(OnnxInstance {
            session,
            gpu,
            io: io.clone(),
            version,
            ragged: ragged.clone(),
            batch_io: batch_io.clone(),
            state_outputs: state_outputs.clone(),
            place_outputs: true,
            label: format!("model '{}' instance '{}'", config.name, desc.name),
        }));
    }
    Ok(out)
}

/// An ORT error without what it hands back (a session builder, which is not to be kept in a load
/// error): the same code and message.
fn detach<R>(e: ort::Error<R>) -> ort::Error {
    ort::Error::new_with_code(e.code(), e.message())
}

struct OnnxInstance {
    /// Declared before `gpu`: the session runs on the GPU instance's stream, so it goes first.
    session: Session,
    /// The instance's CUDA stream and staging memory, for `KIND_GPU`.
    gpu: Option<GpuIo>,
    io: Arc<IoSpec>,
    version: i64,
    ragged: Vec<String>,
    /// The batch inputs the server makes and the batch outputs it scatters (ragged batching).
    batch_io: BatchIo,
    /// The sequence batcher's state outputs (configured outputs too): never written in place.
    state_outputs: Vec<String>,
    /// Whether ORT is handed the client's shared memory as a CPU run's output buffers (`placed.rs`);
    /// off once the model's outputs turned out not to have the shapes it declares.
    place_outputs: bool,
    label: String,
}

impl BackendInstance for OnnxInstance {
    fn execute(&mut self, jobs: &mut Vec<Job>, _thread: ExecutionThread) -> ExecutionTimes {
        let start = Instant::now();
        let mut times = ExecutionTimes::default();
        if let Err(message) = self.run(jobs, &mut times) {
            let error = InferError::internal(format!("{}: {message}", self.label));
            for job in jobs.iter_mut() {
                job.fail(error.clone());
            }
        }
        if times.infer.is_zero() {
            times.infer = start.elapsed();
        }
        times
    }

    fn finalize(self: Box<Self>) {}

    fn device_io(&self) -> Option<usize> {
        self.gpu.as_ref().map(GpuIo::device)
    }
}

impl OnnxInstance {
    fn run(&mut self, jobs: &mut [Job], times: &mut ExecutionTimes) -> Result<(), String> {
        let t0 = Instant::now();
        let batching = self.io.max_batch_size > 0;
        // Every input the requests carry (model inputs, and control and state tensors the sequence
        // batcher added), gathered along the batch dimension.
        let names: Vec<String> =
            jobs.first().map(|j| j.request.inputs.iter().map(|t| t.name.clone()).collect()).unwrap_or_default();
        let mut inputs: Vec<Gathered> = Vec::with_capacity(names.len());
        for name in &names {
            let ragged = self.ragged.contains(name);
            inputs.push(gather(jobs, name, ragged).map_err(|e| e.message)?);
        }
        inputs.extend(self.batch_io.inputs(jobs).map_err(|e| e.message)?);
        let batch_sizes: Vec<i64> = jobs.iter().map(|j| j.request.batch_size(batching)).collect();
        // Only the outputs some request asks for (and implicit state) are computed.
        let io = &self.io;
        let wanted = |name: &str| {
            io.is_state_output(name) || jobs.iter().any(|j| j.request.requested_outputs.iter().any(|o| o == name))
        };
        let mut placed_here: Vec<placed::Placed> = Vec::new();
        let (outputs, in_place, mut refused, t1, t2) = match &mut self.gpu {
            Some(gpu) => {
                let requests: &[Job] = jobs;
                // For each input, each job's part of it still in GPU memory (none in the usual case).
                let device_inputs = if requests.iter().all(|j| j.request.device_inputs.is_empty()) {
                    Vec::new()
                } else {
                    names
                        .iter()
                        .map(|name| requests.iter().map(|j| j.request.device_inputs.get(name)).collect())
                        .collect()
                };
                let (batch_io, states) = (&self.batch_io, &self.state_outputs);
                let batch = gpu::Batch {
                    jobs: requests.len(),
                    rows: batching.then_some(&batch_sizes[..]),
                    device_inputs,
                    // Outputs scattered by an input's shape (ragged batching), and a sequence's
                    // state (which the server keeps as host bytes), come back to the host.
                    destination: &|j, name| {
                        if batch_io.scatter_source(name).is_some() || states.iter().any(|s| s == name) {
                            return None;
                        }
                        requests.get(j).and_then(|job| job.request.device_outputs.get(name))
                    },
                };
                let run = gpu.infer(&mut self.session, &inputs, &batch, &wanted)?;
                (run.host, run.in_place, run.refused, run.enqueued, run.ran)
            }
            None => {
                // One request's outputs the client placed in system shared memory: ORT writes
                // them there itself (`placed.rs`).
                let (batch_io, states) = (&self.batch_io, &self.state_outputs);
                let skip = |name: &str| batch_io.scatter_source(name).is_some() || states.iter().any(|s| s == name);
                let plan = match &jobs[..] {
                    [job] if self.place_outputs => placed::plan(&self.session, &inputs, job, &wanted, &skip),
                    _ => Vec::new(),
                };
                let (host, t1, t2, placing) = infer_on_cpu(&mut self.session, &inputs, &wanted, &plan)?;
                match placing {
                    Placing::Written => placed_here = plan,
                    Placing::None => {}
                    Placing::Refused => {
                        tracing::warn!(
                            "{}: ONNX Runtime refused outputs of the shapes the model declares; its outputs in shared memory are copied there from now on",
                            self.label
                        );
                        self.place_outputs = false;
                    }
                }
                (host, Vec::new(), vec![None; jobs.len()], t1, t2)
            }
        };
        // Each job's outputs: (tensor, its bytes, whether it is checked as it is). The tensor of an
        // output written into the job's GPU memory carries no bytes; a job whose region was too
        // small for one fails.
        let mut per_job: Vec<Vec<(Tensor, usize, bool)>> = vec![Vec::new(); jobs.len()];
        let mut written: Vec<Vec<String>> = vec![Vec::new(); jobs.len()];
        for out in in_place {
            for (j, (len, placed)) in out.jobs.into_iter().enumerate() {
                if !matches!(placed, gpu::Placed::Written) {
                    continue;
                }
                let mut shape = out.shape.clone();
                if batching && let Some(rows) = shape.first_mut() {
                    *rows = batch_sizes[j];
                }
                if tracing::enabled!(tracing::Level::DEBUG) {
                    let id = &jobs[j].request.id;
                    tracing::debug!(
                        "[request id: {id}] output '{}' ({len} bytes) written in place on the GPU",
                        out.name
                    );
                }
                let tensor = Tensor { name: out.name.clone(), datatype: out.datatype, shape, data: Default::default() };
                per_job[j].push((tensor, len, true));
                written[j].push(out.name.clone());
            }
        }
        for p in placed_here {
            // The client shrank its object while ORT wrote the output: the request's error, as the
            // frontend would have given it.
            if let Err(e) = p.place.check() {
                refused[0] = Some(e.message);
                continue;
            }
            let len = p.place.len();
            if tracing::enabled!(tracing::Level::DEBUG) {
                let id = &jobs[0].request.id;
                tracing::debug!(
                    "[request id: {id}] output '{}' ({len} bytes) written in place in shared memory",
                    p.name
                );
            }
            let tensor =
                Tensor { name: p.name.clone(), datatype: p.datatype, shape: p.shape, data: Default::default() };
            per_job[0].push((tensor, len, true));
            written[0].push(p.name);
        }
        for tensor in outputs {
            let name = tensor.name.clone();
            let source = self.batch_io.scatter_source(&name);
            let parts = match source {
                Some(source) => scatter_with_input_shape(&tensor, source, jobs).map_err(|e| e.message)?,
                None if batching => scatter(&tensor, &batch_sizes).map_err(|e| e.message)?,
                None => vec![tensor],
            };
            for (((out, job), part), written) in per_job.iter_mut().zip(jobs.iter()).zip(parts).zip(&written) {
                let wants = job.request.requested_outputs.contains(&name) || self.io.is_state_output(&name);
                if wants && !written.contains(&name) {
                    let len = part.data.len();
                    out.push((part, len, source.is_none()));
                }
            }
        }
        for ((((job, mut outputs), batch), in_place), refused) in
            jobs.iter_mut().zip(per_job).zip(&batch_sizes).zip(written).zip(refused)
        {
            if let Some(message) = refused {
                job.fail(InferError::invalid(message));
                continue;
            }
            if !in_place.is_empty() {
                // In the model's order.
                let session = &self.session;
                outputs.sort_by_key(|(t, ..)| session.outputs().iter().position(|o| o.name() == t.name));
            }
            let mut checked = Vec::with_capacity(outputs.len());
            for (mut t, len, check) in outputs {
                // A batch output has its source input's shape, which the batcher let vary.
                if check && let Some(shape) = check_output_of_len(&self.io, &t, len, *batch)? {
                    t.shape = shape;
                }
                checked.push(t);
            }
            let response = InferenceResponse {
                model_name: self.io.model_name.clone(),
                model_version: self.version,
                id: job.request.id.clone(),
                parameters: Vec::new(),
                outputs: checked,
                in_place,
                spent: Default::default(),
            };
            job.sender.send_final(Ok(response));
        }
        *times = ExecutionTimes { input: t1 - t0, infer: t2 - t1, output: t2.elapsed() };
        Ok(())
    }
}

/// What became of the outputs a CPU run was to write into the client's shared memory.
enum Placing {
    /// None were to be.
    None,
    /// ORT wrote them there.
    Written,
    /// The run failed with them and succeeded without: the model's outputs do not have the shapes
    /// it declares, so its instance stops placing them.
    Refused,
}

/// Runs a CPU session once: inputs read in place or copied into ORT values, the outputs in
/// `placed` written into the client's shared memory, the other wanted outputs lent out. Returns
/// those with the instants the inputs were ready and the run ended, and what became of `placed`: a
/// run that fails with them is run again without, so their places are then not to be trusted.
fn infer_on_cpu(
    session: &mut Session,
    inputs: &[Gathered],
    wanted: &dyn Fn(&str) -> bool,
    placed: &[placed::Placed],
) -> Result<(Vec<Tensor>, Instant, Instant, Placing), String> {
    if placed.is_empty() {
        return run_cpu(session, inputs, wanted, &[]).map(|(host, t1, t2)| (host, t1, t2, Placing::None));
    }
    match run_cpu(session, inputs, wanted, placed) {
        Ok((host, t1, t2)) => Ok((host, t1, t2, Placing::Written)),
        Err(e) => {
            tracing::debug!("a run with outputs written in shared memory failed ({e}); running it again without");
            let (host, t1, t2) = run_cpu(session, inputs, wanted, &[])?;
            Ok((host, t1, t2, Placing::Refused))
        }
    }
}

fn run_cpu(
    session: &mut Session,
    inputs: &[Gathered],
    wanted: &dyn Fn(&str) -> bool,
    placed: &[placed::Placed],
) -> Result<(Vec<Tensor>, Instant, Instant), String> {
    let values: Vec<(String, SessionInputValue<'_>)> =
        inputs.iter().map(|g| Ok((g.name.clone(), to_input(g)?))).collect::<Result<_, String>>()?;
    // When every output is wanted and none placed, the plain run saves creating run options for
    // every execution. The options hold the placed outputs' ORT tensors, which do not own their
    // buffers; they are dropped here, before the caller drops the places.
    let options = if placed.is_empty() && session.outputs().iter().all(|o| wanted(o.name())) {
        None
    } else {
        let mut selector = session
            .outputs()
            .iter()
            .filter(|o| wanted(o.name()))
            .fold(OutputSelector::no_default(), |s, o| s.with(o.name()));
        for p in placed {
            selector = selector.preallocate(p.name.clone(), placed::value(p)?);
        }
        Some(RunOptions::new().map_err(|e| e.to_string())?.with_outputs(selector))
    };
    let t1 = Instant::now();
    let outputs = match &options {
        None => session.run(values),
        Some(options) => session.run_with_options(values, options),
    }
    .map_err(|e| e.to_string())?;
    let t2 = Instant::now();
    let mut host = Vec::new();
    for (name, value) in outputs {
        if wanted(name) && !placed.iter().any(|p| p.name == name) {
            host.push(from_output(name, value)?);
        }
    }
    Ok((host, t1, t2))
}
