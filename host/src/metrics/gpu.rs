//! The GPU gauges tritonserver reports (`nv_gpu_utilization`, `nv_gpu_memory_total_bytes`,
//! `nv_gpu_memory_used_bytes`, `nv_gpu_power_usage`, `nv_gpu_power_limit` and the
//! `nv_energy_consumption` counter, each labelled `gpu_uuid`), for every CUDA device the server
//! sees (`CUDA_VISIBLE_DEVICES` honoured), read through NVML when the endpoint is scraped, at most
//! once per `--metrics-interval-ms`.
//!
//! tritonserver reads them through DCGM; NVML (`libnvidia-ml`, installed with every NVIDIA driver)
//! gives the same values without a DCGM daemon. It is loaded at run time: without a GPU or a
//! driver the gauges are simply absent, as on a tritonserver without GPUs.
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use parking_lot::Mutex;
use prometheus::{Counter, CounterVec, Gauge, GaugeVec, Opts, Registry};

/// One device's gauges, and its UUID to find it in NVML again.
struct Device {
    uuid: String,
    utilization: Gauge,
    memory_total: Gauge,
    memory_used: Gauge,
    power_usage: Gauge,
    power_limit: Gauge,
    energy: Counter,
}

pub struct GpuGauges {
    nvml: Nvml,
    devices: Vec<Device>,
    interval: Duration,
    /// When the gauges were last sampled, and each device's energy counter then (mJ).
    last: Mutex<Option<(Instant, Vec<Option<u64>>)>>,
}

impl GpuGauges {
    /// The gauges of the server's CUDA devices, registered in `registry`; `None` (logged) where
    /// there is no device or NVML cannot be loaded.
    pub fn new(registry: &Registry, interval: Duration) -> Result<Option<Self>, prometheus::Error> {
        let uuids: Vec<String> = (0..crate::gpu::device_count()).filter_map(crate::gpu::device_uuid).collect();
        if uuids.is_empty() {
            return Ok(None);
        }
        let nvml = match Nvml::builder().lib_path("libnvidia-ml.so.1".as_ref()).init().or_else(|_| Nvml::init()) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("GPU metrics are unavailable: cannot load NVML ({e})");
                return Ok(None);
            }
        };
        let gauge = |name: &str, help: &str| -> Result<GaugeVec, prometheus::Error> {
            let g = GaugeVec::new(Opts::new(name, help), &["gpu_uuid"])?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let utilization = gauge("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)")?;
        let memory_total = gauge("nv_gpu_memory_total_bytes", "GPU total memory, in bytes")?;
        let memory_used = gauge("nv_gpu_memory_used_bytes", "GPU used memory, in bytes")?;
        let power_usage = gauge("nv_gpu_power_usage", "GPU power usage in watts")?;
        let power_limit = gauge("nv_gpu_power_limit", "GPU power management limit in watts")?;
        let energy = CounterVec::new(
            Opts::new("nv_energy_consumption", "GPU energy consumption in joules since the Triton Server started"),
            &["gpu_uuid"],
        )?;
        registry.register(Box::new(energy.clone()))?;
        let mut devices = Vec::new();
        for uuid in uuids {
            if let Err(e) = nvml.device_by_uuid(uuid.as_str()) {
                tracing::warn!("GPU metrics will not be available for device {uuid}: {e}");
                continue;
            }
            let labels = [uuid.as_str()];
            devices.push(Device {
                utilization: utilization.with_label_values(&labels),
                memory_total: memory_total.with_label_values(&labels),
                memory_used: memory_used.with_label_values(&labels),
                power_usage: power_usage.with_label_values(&labels),
                power_limit: power_limit.with_label_values(&labels),
                energy: energy.with_label_values(&labels),
                uuid,
            });
        }
        Ok(Some(GpuGauges { nvml, devices, interval, last: Mutex::new(None) }))
    }

    /// Samples the gauges unless the last sample is more recent than the interval. A reading NVML
    /// does not support on a device (power on some boards) leaves its gauge at 0.
    pub fn sample(&self) {
        let now = Instant::now();
        let mut last = self.last.lock();
        if last.as_ref().is_some_and(|(at, _)| now.duration_since(*at) < self.interval) {
            return;
        }
        let mut energies = Vec::with_capacity(self.devices.len());
        for (i, d) in self.devices.iter().enumerate() {
            let Ok(device) = self.nvml.device_by_uuid(d.uuid.as_str()) else {
                energies.push(None);
                continue;
            };
            if let Ok(u) = device.utilization_rates() {
                d.utilization.set(f64::from(u.gpu) * 0.01);
            }
            if let Ok(m) = device.memory_info() {
                d.memory_total.set(m.total as f64);
                d.memory_used.set(m.used as f64);
            }
            if let Ok(mw) = device.power_usage() {
                d.power_usage.set(f64::from(mw) * 0.001);
            }
            if let Ok(mw) = device.enforced_power_limit() {
                d.power_limit.set(f64::from(mw) * 0.001);
            }
            let energy = device.total_energy_consumption().ok();
            // The counter starts at the first reading (joules since the server started).
            let before = last.as_ref().and_then(|(_, e)| e.get(i).copied().flatten());
            if let (Some(now_mj), Some(before_mj)) = (energy, before) {
                d.energy.inc_by(now_mj.saturating_sub(before_mj) as f64 * 0.001);
            }
            energies.push(energy.or(before));
        }
        *last = Some((now, energies));
    }
}
