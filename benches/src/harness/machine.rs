//! What machine a run was on: from /proc and a few commands, each `"unknown"` where missing.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The machine, as the report describes it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// `MemTotal` from /proc/meminfo, in GiB.
    pub memory_gib: f64,
    /// `uname -r`.
    pub kernel: String,
    /// The data directory's filesystem: type, device and mount point (from /proc/mounts).
    pub data_fs: String,
    /// The data directory.
    pub data_dir: String,
    /// /proc/loadavg's 1-minute figure when the run started: other work on the machine.
    pub load_at_start: f64,
}

impl Machine {
    /// Describes this machine, with `data_dir` (which must exist) for the filesystem.
    pub fn describe(data_dir: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_owned());
        Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            memory_gib: mem_total_kib(&meminfo).map_or(0.0, |k| k as f64 / f64::from(1 << 20)),
            kernel: command_line("uname", &["-r"]).unwrap_or_else(|| "unknown".into()),
            data_fs: filesystem_of(&mounts, &dir.to_string_lossy())
                .unwrap_or_else(|| "unknown".into()),
            data_dir: dir.display().to_string(),
            load_at_start: load_average().unwrap_or(f64::NAN),
        }
    }

    /// One line for the report.
    pub fn line(&self) -> String {
        format!(
            "{} cores ({}), {:.1} GiB memory, kernel {}, data directory on {}; load average {:.2} \
             when the run started",
            self.cores,
            self.cpu_model,
            self.memory_gib,
            self.kernel,
            self.data_fs,
            self.load_at_start
        )
    }
}

/// The 1-minute load average, from /proc/loadavg.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The first line of a command's stdout.
pub fn command_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s.lines().next()?.trim();
    (out.status.success() && !line.is_empty()).then(|| line.to_owned())
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// "TYPE (DEVICE at MOUNTPOINT)" of the mount holding `path`: the longest mount point that is
/// a prefix of it, by path components.
fn filesystem_of(mounts: &str, path: &str) -> Option<String> {
    let mut best: Option<(&str, &str, &str)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(dev), Some(point), Some(fs)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if Path::new(path).starts_with(point) && best.is_none_or(|(_, p, _)| point.len() >= p.len())
        {
            best = Some((dev, point, fs));
        }
    }
    best.map(|(dev, point, fs)| format!("{fs} ({dev} at {point})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest matching mount point wins, by whole components (/work is not /workspace).
    #[test]
    fn filesystem_is_the_longest_mount_prefix() {
        let mounts = "overlay / overlay rw 0 0\n/dev/vdb /work ext4 rw 0 0\n\
                      tmpfs /workspace tmpfs rw 0 0\n";
        assert_eq!(
            filesystem_of(mounts, "/work/tmp/x").as_deref(),
            Some("ext4 (/dev/vdb at /work)")
        );
        assert_eq!(
            filesystem_of(mounts, "/tmp/x").as_deref(),
            Some("overlay (overlay at /)")
        );
        assert_eq!(filesystem_of("", "/tmp"), None);
    }

    /// The model and memory come from their lines.
    #[test]
    fn cpu_and_memory_lines() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: x\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(
            mem_total_kib("MemTotal:       24576000 kB\n"),
            Some(24_576_000)
        );
        assert_eq!(mem_total_kib("MemFree: 1 kB\n"), None);
    }
}
