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

use bytes::Bytes;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{OutputSelector, RunOptions, Session};
use ort::value::{DynValue, TensorElementType, ValueType};

use super::batch::{Gathered, gather, scatter};
use super::onnx_gpu::{self, GpuIo};
use super::{BackendInstance, InstanceDesc, InstanceKind};
use crate::config::ModelConfig;
use crate::error::InferError;
use crate::gpu::InstanceStream;
use crate::request::{InferenceResponse, Job, Tensor};
use crate::stats::ExecutionTimes;
use crate::tensor::{DataType, bytes_elements};
use crate::validate::{IoSpec, check_output};

/// Where `scripts/setup-onnxruntime.sh` installs the library, under the user's cache.
pub fn default_library() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(PathBuf::from(home).join(".cache/nereus/onnxruntime/libonnxruntime.so"))
}

static RUNTIME: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

/// Loads ONNX Runtime once per process; later calls return the first outcome.
pub(crate) fn runtime(library: Option<&Path>) -> Result<&'static ort::environment::Environment, String> {
    let outcome = RUNTIME.get_or_init(|| {
        let path = library.ok_or(
            "no ONNX Runtime library: pass --onnxruntime-library or set NEREUS_ONNXRUNTIME_LIB \
             (scripts/setup-onnxruntime.sh installs one)",
        )?;
        if !path.is_file() {
            return Err(format!(
                "the ONNX Runtime library {} does not exist: scripts/setup-onnxruntime.sh (in the Nereus \
                 repository) installs the CPU one there, or pass --onnxruntime-library PATH",
                path.display()
            ));
        }
        let builder =
            ort::init_from(path).map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", path.display()))?;
        builder.with_name("nereus").build().map_err(|e| format!("cannot start ONNX Runtime: {e}"))
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

/// Creates one session per instance for `model_file`.
pub fn load_instances(
    config: &ModelConfig,
    version: i64,
    model_file: &Path,
    library: Option<&Path>,
    instances: &[InstanceDesc],
    io: Arc<IoSpec>,
) -> Result<Vec<Box<dyn BackendInstance>>, String> {
    let environment = runtime(library)?;
    if !model_file.is_file() {
        return Err(format!("model file {} does not exist", model_file.display()));
    }
    let threads = |key: &str| -> Result<Option<usize>, String> {
        match config.parameters.get(key) {
            None => Ok(None),
            Some(p) => p
                .string_value
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("parameter '{key}' must be a non-negative integer")),
        }
    };
    let (intra, inter) = (threads("intra_op_thread_count")?, threads("inter_op_thread_count")?);
    let level = match config.optimization.as_ref().and_then(|o| o.graph.as_ref()).map(|g| g.level) {
        Some(-1) => GraphOptimizationLevel::Disable,
        Some(1) => GraphOptimizationLevel::Level1,
        _ => GraphOptimizationLevel::All,
    };
    let cuda_options = if instances.iter().any(|d| d.kind == InstanceKind::Gpu) {
        onnx_gpu::cuda_options(config)?
    } else {
        Vec::new()
    };
    let ragged: Vec<String> = config.input.iter().filter(|i| i.allow_ragged_batch).map(|i| i.name.clone()).collect();
    let mut out: Vec<Box<dyn BackendInstance>> = Vec::with_capacity(instances.len());
    for desc in instances {
        let fail = |e: String| format!("instance '{}': {e}", desc.name);
        let mut builder = Session::builder(environment).map_err(|e| fail(e.to_string()))?;
        let stream = match desc.kind {
            InstanceKind::Gpu => {
                let device = usize::try_from(desc.device_id).map_err(|_| fail(format!("GPU {}", desc.device_id)))?;
                let stream = InstanceStream::new(device).map_err(fail)?;
                builder = builder
                    .with_execution_providers([onnx_gpu::provider(&stream, desc.device_id, &cuda_options)])
                    .map_err(|e| fail(format!("the CUDA execution provider is unavailable: {e}")))?;
                Some(stream)
            }
            InstanceKind::Cpu | InstanceKind::Model => None,
        };
        if let Some(n) = intra {
            builder = builder.with_intra_threads(n).map_err(|e| fail(e.to_string()))?;
        }
        if let Some(n) = inter {
            builder = builder.with_inter_threads(n).map_err(|e| fail(e.to_string()))?;
        }
        builder = builder.with_optimization_level(level).map_err(|e| fail(e.to_string()))?;
        let session = builder
            .commit_from_file(model_file)
            .map_err(|e| fail(format!("cannot load {}: {e}", model_file.display())))?;
        let session_inputs: Vec<String> = session.inputs().iter().map(|i| i.name().to_string()).collect();
        for input in &io.inputs {
            if !session_inputs.contains(&input.name) {
                return Err(format!("the model has no input '{}' (it has {:?})", input.name, session_inputs));
            }
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
            label: format!("model '{}' instance '{}'", config.name, desc.name),
        }));
    }
    Ok(out)
}

struct OnnxInstance {
    /// Declared before `gpu`: the session runs on the GPU instance's stream, so it goes first.
    session: Session,
    /// The instance's CUDA stream and staging memory, for `KIND_GPU`.
    gpu: Option<GpuIo>,
    io: Arc<IoSpec>,
    version: i64,
    ragged: Vec<String>,
    label: String,
}

impl BackendInstance for OnnxInstance {
    fn execute(&mut self, jobs: &mut Vec<Job>) -> ExecutionTimes {
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
        let batch_sizes: Vec<i64> = jobs.iter().map(|j| j.request.batch_size(batching)).collect();
        // Only the outputs some request asks for (and implicit state) are computed.
        let io = &self.io;
        let wanted = |name: &str| {
            io.is_state_output(name) || jobs.iter().any(|j| j.request.requested_outputs.iter().any(|o| o == name))
        };
        let (outputs, t1, t2) = match &mut self.gpu {
            Some(gpu) => gpu.infer(&mut self.session, &inputs, &wanted)?,
            None => infer_on_cpu(&mut self.session, &inputs, &wanted)?,
        };
        let mut per_job: Vec<Vec<Tensor>> = vec![Vec::new(); jobs.len()];
        for tensor in outputs {
            let name = tensor.name.clone();
            let parts = if batching { scatter(&tensor, &batch_sizes).map_err(|e| e.message)? } else { vec![tensor] };
            for ((out, job), part) in per_job.iter_mut().zip(jobs.iter()).zip(parts) {
                if job.request.requested_outputs.contains(&name) || self.io.is_state_output(&name) {
                    out.push(part);
                }
            }
        }
        for ((job, outputs), batch) in jobs.iter_mut().zip(per_job).zip(&batch_sizes) {
            let mut checked = Vec::with_capacity(outputs.len());
            for t in outputs {
                let shape = check_output(&self.io, &t, *batch)?;
                checked.push(Tensor { shape, ..t });
            }
            let response = InferenceResponse {
                model_name: self.io.model_name.clone(),
                model_version: self.version,
                id: job.request.id.clone(),
                parameters: Vec::new(),
                outputs: checked,
            };
            job.sender.send_final(Ok(response));
        }
        *times = ExecutionTimes { input: t1 - t0, infer: t2 - t1, output: t2.elapsed() };
        Ok(())
    }
}

/// Runs a CPU session once: inputs copied into ORT values, the wanted outputs copied out.
/// Returns them with the instants the inputs were ready and the run ended.
fn infer_on_cpu(
    session: &mut Session,
    inputs: &[Gathered],
    wanted: &dyn Fn(&str) -> bool,
) -> Result<(Vec<Tensor>, Instant, Instant), String> {
    let values: Vec<(String, DynValue)> =
        inputs.iter().map(|g| Ok((g.name.clone(), to_value(g)?))).collect::<Result<_, String>>()?;
    // When every output is wanted, the plain run saves creating run options for every execution.
    let options = if session.outputs().iter().all(|o| wanted(o.name())) {
        None
    } else {
        let selector = session
            .outputs()
            .iter()
            .filter(|o| wanted(o.name()))
            .fold(OutputSelector::no_default(), |s, o| s.with(o.name()));
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
    for (name, value) in outputs.iter() {
        if wanted(name) {
            host.push(from_value(name, &value)?);
        }
    }
    Ok((host, t1, t2))
}

/// Little-endian element bytes, in parts, as one typed vector.
fn numbers<T, const N: usize>(parts: &[Bytes], from: fn([u8; N]) -> T) -> Vec<T> {
    parts
        .iter()
        .flat_map(|p| p.chunks_exact(N))
        .map(|c| {
            let mut b = [0u8; N];
            b.copy_from_slice(c);
            from(b)
        })
        .collect()
}

/// A gathered input as an ORT value: the requests' bytes copied once, into ORT-owned memory.
pub(super) fn to_value(t: &Gathered) -> Result<DynValue, String> {
    use ort::value::Tensor as OrtTensor;
    let shape = t.shape.clone();
    let d = &t.parts[..];
    let value = match t.datatype {
        DataType::Bool => {
            let flags: Vec<bool> = d.iter().flat_map(|p| p.iter().map(|b| *b != 0)).collect();
            OrtTensor::from_array((shape, flags)).map(|v| v.into_dyn())
        }
        DataType::Uint8 => OrtTensor::from_array((shape, numbers(d, u8::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int8 => OrtTensor::from_array((shape, numbers(d, i8::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Uint16 => OrtTensor::from_array((shape, numbers(d, u16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int16 => OrtTensor::from_array((shape, numbers(d, i16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Uint32 => OrtTensor::from_array((shape, numbers(d, u32::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int32 => OrtTensor::from_array((shape, numbers(d, i32::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Uint64 => OrtTensor::from_array((shape, numbers(d, u64::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int64 => OrtTensor::from_array((shape, numbers(d, i64::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Fp32 => OrtTensor::from_array((shape, numbers(d, f32::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Fp64 => OrtTensor::from_array((shape, numbers(d, f64::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Fp16 => OrtTensor::from_array((shape, numbers(d, half::f16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Bf16 => OrtTensor::from_array((shape, numbers(d, half::bf16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Bytes => {
            let strings = d
                .iter()
                .flat_map(|p| bytes_elements(p))
                .map(|e| {
                    let e = e.map_err(str::to_string)?;
                    String::from_utf8(e.to_vec()).map_err(|_| format!("input '{}' holds a non-UTF-8 string", t.name))
                })
                .collect::<Result<Vec<String>, String>>()?;
            OrtTensor::from_string_array((shape, strings.as_slice())).map(|v| v.into_dyn())
        }
    };
    value.map_err(|e| format!("input '{}': {e}", t.name))
}

/// An ORT output as a host tensor.
pub(super) fn from_value(name: &str, value: &ort::value::DynValueRef<'_>) -> Result<Tensor, String> {
    let ValueType::Tensor { ty, .. } = value.dtype() else {
        return Err(format!("output '{name}' is not a tensor"));
    };
    let err = |e: ort::Error| format!("output '{name}': {e}");
    macro_rules! num {
        ($t:ty, $dt:expr) => {{
            let (shape, data) = value.try_extract_tensor::<$t>().map_err(err)?;
            let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            (shape.iter().copied().collect::<Vec<i64>>(), $dt, bytes)
        }};
    }
    let (shape, datatype, bytes) = match ty {
        TensorElementType::Bool => {
            let (shape, data) = value.try_extract_tensor::<bool>().map_err(err)?;
            (shape.iter().copied().collect(), DataType::Bool, data.iter().map(|b| u8::from(*b)).collect())
        }
        TensorElementType::Uint8 => num!(u8, DataType::Uint8),
        TensorElementType::Int8 => num!(i8, DataType::Int8),
        TensorElementType::Uint16 => num!(u16, DataType::Uint16),
        TensorElementType::Int16 => num!(i16, DataType::Int16),
        TensorElementType::Uint32 => num!(u32, DataType::Uint32),
        TensorElementType::Int32 => num!(i32, DataType::Int32),
        TensorElementType::Uint64 => num!(u64, DataType::Uint64),
        TensorElementType::Int64 => num!(i64, DataType::Int64),
        TensorElementType::Float32 => num!(f32, DataType::Fp32),
        TensorElementType::Float64 => num!(f64, DataType::Fp64),
        TensorElementType::Float16 => num!(half::f16, DataType::Fp16),
        TensorElementType::Bfloat16 => num!(half::bf16, DataType::Bf16),
        TensorElementType::String => {
            let (shape, strings) = value.try_extract_strings().map_err(err)?;
            let mut bytes = Vec::new();
            for s in strings {
                bytes.extend_from_slice(&(s.len() as u32).to_le_bytes());
                bytes.extend_from_slice(s.as_bytes());
            }
            (shape.iter().copied().collect(), DataType::Bytes, bytes)
        }
        other => return Err(format!("output '{name}': element type {other:?} is not supported by this backend yet")),
    };
    Ok(Tensor { name: name.to_string(), datatype, shape, data: Bytes::from(bytes) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library the test script installs, if present (required when NEREUS_REQUIRE_ONNXRUNTIME is set).
    fn environment() -> Option<&'static ort::environment::Environment> {
        let lib = std::env::var_os("NEREUS_ONNXRUNTIME_LIB").map(PathBuf::from).or_else(default_library)?;
        match runtime(Some(&lib)) {
            Ok(env) => Some(env),
            Err(e) => {
                assert!(std::env::var_os("NEREUS_REQUIRE_ONNXRUNTIME").is_none(), "{e}");
                None
            }
        }
    }

    #[test]
    fn every_datatype_round_trips_through_ort_values() {
        if environment().is_none() {
            eprintln!("skipping: no ONNX Runtime library");
            return;
        }
        let mut strings = Vec::new();
        for s in ["", "héllo", "42"] {
            strings.extend_from_slice(&(s.len() as u32).to_le_bytes());
            strings.extend_from_slice(s.as_bytes());
        }
        let cases: Vec<(DataType, Vec<u8>)> = vec![
            (DataType::Bool, vec![0, 1, 1]),
            (DataType::Uint8, vec![0, 7, 255]),
            (DataType::Int8, vec![0x80, 0, 0x7f]),
            (DataType::Int16, [-2i16, 0, 9].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Uint16, [2u16, 0, 9].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Int32, [-5i32, 0, 1 << 30].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Uint32, [5u32, 0, u32::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Int64, [-5i64, 0, i64::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Uint64, [5u64, 0, u64::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (
                DataType::Fp16,
                [0.5f32, -2.0, 65504.0].iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
            ),
            (
                DataType::Bf16,
                [0.5f32, -2.0, 1e30].iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
            ),
            (DataType::Fp32, [0.5f32, -2.0, f32::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Fp64, [0.5f64, -2.0, f64::MIN].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Bytes, strings),
        ];
        for (datatype, data) in cases {
            let t = Tensor { name: "T".into(), datatype, shape: vec![1, 3], data: Bytes::from(data) };
            let gathered =
                Gathered { name: t.name.clone(), datatype, shape: t.shape.clone(), parts: vec![t.data.clone()] };
            let value = to_value(&gathered).unwrap();
            let back = from_value("T", &value.view()).unwrap();
            assert_eq!(back, t, "{datatype}");
        }
    }
}
