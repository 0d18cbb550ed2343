//! The machine's gauges tritonserver reports (`nv_cpu_utilization`, `nv_cpu_memory_total_bytes`,
//! `nv_cpu_memory_used_bytes`), read from `/proc` when the endpoint is scraped, at most once per
//! `--metrics-interval-ms` (utilisation is the busy share of CPU time between two samples).
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus::{Gauge, Registry};

pub struct SystemGauges {
    utilization: Gauge,
    memory_total: Gauge,
    memory_used: Gauge,
    interval: Duration,
    /// When the gauges were last sampled, and the CPU counters then: (busy, total) jiffies.
    last: Mutex<Option<(Instant, (u64, u64))>>,
}

impl SystemGauges {
    pub fn new(registry: &Registry, interval: Duration) -> Result<Self, prometheus::Error> {
        let gauge = |name: &str, help: &str| -> Result<Gauge, prometheus::Error> {
            let g = Gauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        Ok(SystemGauges {
            utilization: gauge("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]")?,
            memory_total: gauge("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes")?,
            memory_used: gauge("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes")?,
            interval,
            last: Mutex::new(None),
        })
    }

    /// Samples the gauges unless the last sample is more recent than the interval.
    pub fn sample(&self) {
        let now = Instant::now();
        let mut last = self.last.lock();
        if last.is_some_and(|(at, _)| now.duration_since(at) < self.interval) {
            return;
        }
        if let Some((busy, total)) = cpu_jiffies() {
            if let Some((_, (busy0, total0))) = *last
                && total > total0
            {
                self.utilization.set(busy.saturating_sub(busy0) as f64 / (total - total0) as f64);
            }
            *last = Some((now, (busy, total)));
        }
        if let Some((total, available)) = memory_bytes() {
            self.memory_total.set(total as f64);
            self.memory_used.set(total.saturating_sub(available) as f64);
        }
    }
}

/// The machine's CPU time so far, in jiffies: (busy, total), from the `cpu` line of `/proc/stat`
/// (idle and iowait are not busy).
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let values: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user and nice).
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// The machine's memory: (total, available) bytes, from `/proc/meminfo`.
fn memory_bytes() -> Option<(u64, u64)> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_line() {
        assert_eq!(parse_cpu_line("cpu  10 0 5 80 5 0 0 0 0 0"), Some((15, 100)));
        assert_eq!(parse_cpu_line("cpu0 1 2 3"), None);
    }
}
