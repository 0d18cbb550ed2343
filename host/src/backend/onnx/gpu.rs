//! ONNX Runtime instances of kind `KIND_GPU`: the CUDA execution provider runs on the instance's
//! own CUDA stream (ORT's "user compute stream"), inputs go to the device through the instance's
//! pinned staging memory on that stream, and outputs come back on the same stream.
//!
//! Inputs and outputs are bound with an ORT `IoBinding`, so ORT neither copies inputs itself nor
//! computes outputs no request asked for. Strings and booleans take ORT's own path (strings cannot
//! live on a GPU; booleans are normalised to 0/1 on the host first).
#![allow(unsafe_code)] // ORT's user-compute-stream option and a Send assertion; each says why it is sound.

use std::time::Instant;

use ort::ep::{ArbitrarilyConfigurableExecutionProvider, CUDA, ExecutionProviderDispatch};
use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::Session;
use ort::value::{DynTensor, DynTensorValueType, TensorElementType, ValueType};

use super::values::{from_value, host_datatype, to_value};
use crate::backend::batch::Gathered;
use crate::config::ModelConfig;
use crate::gpu::{DevicePtr, InstanceStream, Part};
use crate::load_error::{CudaOptionError, InstanceError};
use crate::request::Tensor;
use crate::shm::DeviceSpan;
use crate::tensor::DataType;

/// The CUDA execution provider options a model's configuration sets, as Triton's ORT backend reads
/// them: `optimization { execution_accelerators { gpu_execution_accelerator [ { name: "cuda"
/// parameters {...} } ] } }` passed to ORT as they are, and the older `parameters`
/// `cudnn_conv_algo_search` (0 exhaustive, the default; 1 heuristic; 2 default algorithm),
/// `gpu_mem_limit` and `arena_extend_strategy` (0 next power of two; 1 same as requested).
pub(super) fn cuda_options(config: &ModelConfig) -> Result<Vec<(String, String)>, CudaOptionError> {
    let mut options = Vec::new();
    let parameter = |key: &str| config.parameters.get(key).map(|p| p.string_value.trim().to_string());
    if let Some(v) = parameter("cudnn_conv_algo_search") {
        let search = match v.as_str() {
            "0" => "EXHAUSTIVE",
            "1" => "HEURISTIC",
            "2" => "DEFAULT",
            _ => return Err(CudaOptionError::ConvAlgoSearch(v)),
        };
        options.push(("cudnn_conv_algo_search".to_string(), search.to_string()));
    }
    if let Some(v) = parameter("gpu_mem_limit") {
        if v.parse::<u64>().is_err() {
            return Err(CudaOptionError::GpuMemLimit(v));
        }
        options.push(("gpu_mem_limit".to_string(), v));
    }
    if let Some(v) = parameter("arena_extend_strategy") {
        let strategy = match v.as_str() {
            "0" => "kNextPowerOfTwo",
            "1" => "kSameAsRequested",
            _ => return Err(CudaOptionError::ArenaExtendStrategy(v)),
        };
        options.push(("arena_extend_strategy".to_string(), strategy.to_string()));
    }
    let accelerators = config
        .optimization
        .as_ref()
        .and_then(|o| o.execution_accelerators.as_ref())
        .map(|a| a.gpu_execution_accelerator.as_slice())
        .unwrap_or_default();
    for accelerator in accelerators {
        if accelerator.name != "cuda" {
            return Err(CudaOptionError::Accelerator(accelerator.name.clone()));
        }
        let mut keys: Vec<_> = accelerator.parameters.iter().collect();
        keys.sort();
        for (key, value) in keys {
            // The device and stream are the instance's own (`gpus`, one stream per instance).
            if ["device_id", "has_user_compute_stream", "user_compute_stream"].contains(&key.as_str()) {
                return Err(CudaOptionError::Reserved(key.clone()));
            }
            if key.contains('\0') || value.contains('\0') {
                return Err(CudaOptionError::NulByte(key.clone()));
            }
            options.push((key.clone(), value.clone()));
        }
    }
    Ok(options)
}

/// The CUDA execution provider for an instance: its device, its stream, FP32 kept FP32 (no TF32
/// matrix maths, so results agree with the CPU to FP32 precision) unless `options` say otherwise,
/// then the model's own options. Registration failing (e.g. a CPU-only ONNX Runtime library, or an
/// option ORT does not know) fails the instance rather than silently running on the CPU.
pub(super) fn provider(
    stream: &InstanceStream,
    device_id: i32,
    options: &[(String, String)],
) -> ExecutionProviderDispatch {
    // SAFETY: the stream outlives the session: both belong to the same instance, and the session
    // is dropped first (field order of the owning instance).
    let mut cuda =
        unsafe { CUDA::default().with_device_id(device_id).with_tf32(false).with_compute_stream(stream.raw()) };
    for (key, value) in options {
        cuda = cuda.with_arbitrary_config(key, value);
    }
    cuda.build().error_on_failure()
}

/// The device side of one GPU instance.
pub(super) struct GpuIo {
    allocator: Allocator,
    cuda: MemoryInfo<'static>,
    cpu: MemoryInfo<'static>,
    /// The GPU (ordinal) the instance runs on.
    device: usize,
    /// Declared last: dropped after the allocator (and after the session, which the owning
    /// instance declares before this).
    stream: InstanceStream,
}

// SAFETY: ORT's CUDA allocator is used from one worker thread at a time (an instance is driven by
// exactly one worker), which is all ORT requires of it.
unsafe impl Send for GpuIo {}

/// ORT's element type for a host datatype whose bytes can go to the device as they are.
fn device_element(datatype: DataType) -> Option<TensorElementType> {
    Some(match datatype {
        DataType::Uint8 => TensorElementType::Uint8,
        DataType::Int8 => TensorElementType::Int8,
        DataType::Uint16 => TensorElementType::Uint16,
        DataType::Int16 => TensorElementType::Int16,
        DataType::Uint32 => TensorElementType::Uint32,
        DataType::Int32 => TensorElementType::Int32,
        DataType::Uint64 => TensorElementType::Uint64,
        DataType::Int64 => TensorElementType::Int64,
        DataType::Fp16 => TensorElementType::Float16,
        DataType::Bf16 => TensorElementType::Bfloat16,
        DataType::Fp32 => TensorElementType::Float32,
        DataType::Fp64 => TensorElementType::Float64,
        DataType::Bool | DataType::Bytes => return None,
    })
}

/// What a batch's requests hold in their GPU memory (CUDA shared memory on the instance's GPU).
pub(super) struct Batch<'a> {
    /// How many jobs the batch has.
    pub jobs: usize,
    /// Each job's rows (its batch size) when the model batches; `None` for a model that does not,
    /// whose executions hold one job.
    pub rows: Option<&'a [i64]>,
    /// For each gathered input (in order; those past the end are all host bytes), each job's
    /// part of it that is still in GPU memory.
    pub device_inputs: Vec<Vec<Option<&'a DeviceSpan>>>,
    /// Where job `j` wants output `name` written in its GPU memory, if it does.
    pub destination: &'a dyn Fn(usize, &str) -> Option<&'a DeviceSpan>,
}

/// How one job's share of an output went.
pub(super) enum Placed {
    /// It is in the host copy of the output (the job did not place it in GPU memory).
    Host,
    /// It was copied into the job's CUDA region: the job's response carries no bytes for it.
    Written,
    /// The job is refused (a region too small for one of its outputs, [`Run::refused`]): nothing
    /// of it was written.
    Refused,
}

/// An output that some jobs of the batch had written into their GPU memory.
pub(super) struct InPlace {
    pub name: String,
    pub datatype: DataType,
    /// The whole batch's shape.
    pub shape: Vec<i64>,
    /// Each job's bytes of it (in the batch's order) and how they went.
    pub jobs: Vec<(usize, Placed)>,
}

/// One run's outcome: the outputs as host tensors (those every job placed in its GPU memory are
/// not among them), those written in place, the jobs refused, and the instants the inputs were
/// enqueued and the run ended.
pub(super) struct Run {
    pub host: Vec<Tensor>,
    pub in_place: Vec<InPlace>,
    /// For each job, why it fails: one of its CUDA regions is too small for its output.
    pub refused: Vec<Option<String>>,
    pub enqueued: Instant,
    pub ran: Instant,
}

impl GpuIo {
    /// Binds the instance's stream to its committed session.
    pub(super) fn new(session: &Session, stream: InstanceStream, device_id: i32) -> Result<GpuIo, InstanceError> {
        let cuda = MemoryInfo::new(AllocationDevice::CUDA, device_id, AllocatorType::Device, MemoryType::Default)
            .map_err(InstanceError::Session)?;
        let cpu = MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default)
            .map_err(InstanceError::Session)?;
        let allocator = Allocator::new(session, cuda.to_owned())
            .map_err(|error| InstanceError::Allocator { device: device_id, error })?;
        let device = usize::try_from(device_id).map_err(|_| InstanceError::Device(device_id))?;
        Ok(GpuIo { allocator, cuda: cuda.to_owned(), cpu: cpu.to_owned(), device, stream })
    }

    /// The GPU this instance runs on.
    pub(super) fn device(&self) -> usize {
        self.device
    }

    /// Runs the session once over the gathered inputs, computing the outputs `wanted` accepts.
    /// Inputs still in requests' GPU memory are copied from device to device, and outputs that
    /// requests placed there are written there from device to device.
    pub(super) fn infer(
        &mut self,
        session: &mut Session,
        inputs: &[Gathered],
        batch: &Batch<'_>,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Result<Run, String> {
        // Copies from or into requests' GPU memory may still be queued when a run fails or panics:
        // they must be done before the requests (and with them the client's mappings) can go.
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run(session, inputs, batch, wanted)));
        if !matches!(outcome, Ok(Ok(_))) {
            let _ = self.stream.synchronize();
        }
        outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    fn run(
        &mut self,
        session: &mut Session,
        inputs: &[Gathered],
        batch: &Batch<'_>,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Result<Run, String> {
        let mut binding = session.create_binding().map_err(|e| e.to_string())?;
        let mut on_device = Vec::with_capacity(inputs.len());
        let mut uploads: Vec<(DevicePtr, Vec<Part<'_>>)> = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let device_parts = batch.device_inputs.get(i).map(Vec::as_slice).unwrap_or_default();
            match device_element(input.datatype) {
                Some(ty) => {
                    let mut tensor = DynTensor::new(&self.allocator, ty, input.shape.clone())
                        .map_err(|e| format!("input '{}': {e}", input.name))?;
                    let parts: Vec<Part<'_>> = input
                        .parts
                        .iter()
                        .enumerate()
                        .map(|(j, bytes)| match device_parts.get(j).copied().flatten() {
                            Some(span) => Part::Device(span.ptr(), span.len()),
                            None => Part::Host(bytes),
                        })
                        .collect();
                    // The copies fill the tensor exactly: never past its end, never leaving a gap.
                    let filled: usize = parts.iter().map(Part::len).sum();
                    let size = tensor_bytes(&input.shape, input.datatype);
                    if Some(filled) != size {
                        return Err(format!(
                            "input '{}': {filled} bytes for a tensor of shape {:?} ({})",
                            input.name, input.shape, input.datatype
                        ));
                    }
                    uploads.push((tensor.data_ptr_mut() as DevicePtr, parts));
                    on_device.push((input.name.as_str(), tensor));
                }
                // The server copies such inputs to the host before they get here
                // (`DataType::goes_to_device_as_is`).
                None if device_parts.iter().any(Option::is_some) => {
                    return Err(format!("input '{}' ({}) cannot be read from GPU memory", input.name, input.datatype));
                }
                None => {
                    let value = to_value(input)?;
                    binding
                        .bind_input(input.name.as_str(), &value)
                        .map_err(|e| format!("input '{}': {e}", input.name))?;
                }
            }
        }
        self.stream.upload(&uploads)?;
        for (name, tensor) in &on_device {
            binding.bind_input(*name, tensor).map_err(|e| format!("input '{name}': {e}"))?;
        }
        for output in session.outputs().iter().filter(|o| wanted(o.name())) {
            let on_gpu = matches!(output.dtype(), ValueType::Tensor { ty, .. } if host_datatype(*ty).is_some());
            let memory = if on_gpu { &self.cuda } else { &self.cpu };
            binding
                .bind_output_to_device(output.name(), memory)
                .map_err(|e| format!("output '{}': {e}", output.name()))?;
        }
        let enqueued = Instant::now();
        let outputs = session.run_binding(&binding).map_err(|e| e.to_string())?;
        let ran = Instant::now();
        let mut host = Vec::new();
        let mut device = Vec::new();
        for (name, value) in outputs.iter() {
            let ValueType::Tensor { ty, shape, .. } = value.dtype() else {
                return Err(format!("output '{name}' is not a tensor"));
            };
            let (ty, shape) = (*ty, shape.iter().copied().collect::<Vec<i64>>());
            let tensor = value.downcast::<DynTensorValueType>().map_err(|e| format!("output '{name}': {e}"))?;
            let on_gpu = tensor.memory_info().allocation_device() == AllocationDevice::CUDA;
            match host_datatype(ty).filter(|_| on_gpu).and_then(|d| Some((d, d.element_size()?))) {
                Some((datatype, size)) => {
                    let count: i64 = shape.iter().product();
                    let bytes =
                        usize::try_from(count).map_err(|_| format!("output '{name}' has shape {shape:?}"))? * size;
                    device.push((name.to_string(), datatype, shape, tensor.data_ptr() as DevicePtr, bytes));
                }
                None => host.push(from_value(name, &tensor.into_dyn())?),
            }
        }
        // Outputs placed in requests' GPU memory are copied there on the stream; the rest (and
        // the shares of jobs that did not place them) come back together, in one wait on the
        // stream, which the copies into GPU memory are done by too. A job with a region too small
        // for one of its outputs gets none of them written.
        let targets: Vec<_> =
            device.iter().map(|(name, _, shape, _, bytes)| self.targets(name, shape, *bytes, batch)).collect();
        let mut refused: Vec<Option<String>> = vec![None; batch.jobs];
        for (j, (len, span)) in targets.iter().flatten().flat_map(|t| t.iter().enumerate()) {
            if let Some(span) = span
                && *len > span.len()
                && refused[j].is_none()
            {
                refused[j] = Some(format!(
                    "output of {len} bytes does not fit the {} bytes given in shared memory region '{}'",
                    span.len(),
                    span.region()
                ));
            }
        }
        let mut in_place = Vec::new();
        let mut copies = Vec::new();
        let mut downloaded_meta = Vec::new();
        for ((name, datatype, shape, ptr, bytes), targets) in device.into_iter().zip(targets) {
            let placed = match targets {
                None => None,
                Some(targets) => {
                    let mut offset = 0;
                    let mut placed = Vec::with_capacity(targets.len());
                    for (j, (len, span)) in targets.into_iter().enumerate() {
                        let how = match span {
                            _ if refused[j].is_some() => Placed::Refused,
                            Some(span) => {
                                self.stream.copy_on_device(span.ptr(), ptr + offset as u64, len)?;
                                Placed::Written
                            }
                            None => Placed::Host,
                        };
                        placed.push((len, how));
                        offset += len;
                    }
                    Some(placed)
                }
            };
            if placed.as_ref().is_none_or(|jobs| jobs.iter().any(|(_, p)| matches!(p, Placed::Host))) {
                copies.push((ptr, bytes));
                downloaded_meta.push((name.clone(), datatype, shape.clone()));
            }
            if let Some(jobs) = placed {
                in_place.push(InPlace { name, datatype, shape, jobs });
            }
        }
        let downloaded = self.stream.download(&copies)?;
        drop(outputs);
        drop(on_device);
        for ((name, datatype, shape), bytes) in downloaded_meta.into_iter().zip(downloaded) {
            host.push(Tensor { name, datatype, shape, data: bytes.into() });
        }
        Ok(Run { host, in_place, refused, enqueued, ran })
    }

    /// Each job's share of output `name` (`bytes` bytes, the batch's `shape`) and, for the jobs
    /// that placed it in a CUDA region on this GPU, where it goes. `None` when no job did, or when
    /// the output's rows do not split as the batch's (the scatter then reports it).
    fn targets<'b>(
        &self,
        name: &str,
        shape: &[i64],
        bytes: usize,
        batch: &Batch<'b>,
    ) -> Option<Vec<(usize, Option<&'b DeviceSpan>)>> {
        let spans: Vec<Option<&DeviceSpan>> =
            (0..batch.jobs).map(|j| (batch.destination)(j, name).filter(|span| span.device() == self.device)).collect();
        if spans.iter().all(Option::is_none) {
            return None;
        }
        let lens = shares(batch.rows, batch.jobs, shape, bytes)?;
        Some(lens.into_iter().zip(spans).collect())
    }
}

/// The bytes a tensor of `shape` and `datatype` holds (fixed-size elements), if they fit a usize.
fn tensor_bytes(shape: &[i64], datatype: DataType) -> Option<usize> {
    let elements = shape.iter().try_fold(1usize, |n, d| n.checked_mul(usize::try_from(*d).ok()?))?;
    elements.checked_mul(datatype.element_size()?)
}

/// Each job's bytes of an output of `shape` and `bytes` bytes: the whole of it for the one job of a
/// model that does not batch, else its rows' share. `None` when the rows do not add up to the
/// output's first dimension or its bytes do not divide into rows (the host's scatter then reports
/// the mismatch).
fn shares(rows: Option<&[i64]>, jobs: usize, shape: &[i64], bytes: usize) -> Option<Vec<usize>> {
    let Some(rows) = rows else { return (jobs == 1).then(|| vec![bytes]) };
    let total = usize::try_from(shape.first().copied()?).ok()?;
    let counts: Vec<usize> = rows.iter().map(|r| usize::try_from(*r).ok()).collect::<Option<_>>()?;
    if counts.len() != jobs || counts.iter().sum::<usize>() != total {
        return None;
    }
    let per_row = bytes.checked_div(total).unwrap_or(0);
    (per_row * total == bytes).then(|| counts.iter().map(|r| r * per_row).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outputs_bytes_split_by_the_jobs_rows() {
        // A batch of 1 + 3 rows of 16 INT32s.
        assert_eq!(shares(Some(&[1, 3]), 2, &[4, 16], 256), Some(vec![64, 192]));
        // A model that does not batch: one job takes it all.
        assert_eq!(shares(None, 1, &[16], 64), Some(vec![64]));
        assert_eq!(shares(None, 2, &[16], 64), None);
        // An empty batch, and rows that do not add up or divide.
        assert_eq!(shares(Some(&[0]), 1, &[0, 16], 0), Some(vec![0]));
        assert_eq!(shares(Some(&[1, 2]), 2, &[4, 16], 256), None);
        assert_eq!(shares(Some(&[1, 2]), 2, &[3, 16], 190), None);
        assert_eq!(shares(Some(&[1]), 2, &[1, 16], 64), None);
        assert_eq!(shares(Some(&[-1, 2]), 2, &[1, 16], 64), None);
        assert_eq!(shares(Some(&[1]), 1, &[], 4), None);
    }
    use crate::config::parse_pbtxt;

    #[test]
    fn cuda_options_read_tritons_parameters_and_accelerator_settings() {
        let config = parse_pbtxt(
            r#"parameters { key: "cudnn_conv_algo_search" value: { string_value: "1" } }
               parameters { key: "gpu_mem_limit" value: { string_value: "4294967296" } }
               parameters { key: "arena_extend_strategy" value: { string_value: "1" } }
               optimization { execution_accelerators { gpu_execution_accelerator : [ {
                 name : "cuda"
                 parameters { key: "cudnn_conv_use_max_workspace" value: "0" }
                 parameters { key: "use_ep_level_unified_stream" value: "1" } } ] } }"#,
        )
        .unwrap();
        let options = cuda_options(&config).unwrap();
        let get = |k: &str| options.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("cudnn_conv_algo_search"), Some("HEURISTIC"));
        assert_eq!(get("gpu_mem_limit"), Some("4294967296"));
        assert_eq!(get("arena_extend_strategy"), Some("kSameAsRequested"));
        assert_eq!(get("cudnn_conv_use_max_workspace"), Some("0"));
        assert_eq!(get("use_ep_level_unified_stream"), Some("1"));
        assert!(cuda_options(&ModelConfig::default()).unwrap().is_empty());
        for (src, needle) in [
            (r#"parameters { key: "cudnn_conv_algo_search" value: { string_value: "3" } }"#, "must be 0, 1 or 2"),
            (r#"parameters { key: "gpu_mem_limit" value: { string_value: "lots" } }"#, "byte count"),
            (
                r#"optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" } ] } }"#,
                "'tensorrt' is not supported",
            ),
            (
                r#"optimization { execution_accelerators { gpu_execution_accelerator [ { name: "cuda"
                   parameters { key: "user_compute_stream" value: "0" } } ] } }"#,
                "set by Nereus per instance",
            ),
        ] {
            let err = cuda_options(&parse_pbtxt(src).unwrap()).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }
}
