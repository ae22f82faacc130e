//! The process's own CPU time, for the probes that report CPU per operation.

/// The process's user + system CPU time so far, in seconds (`/proc/self/stat`, in clock ticks
/// of 1/100 s as Linux reports them to user space). Panics off Linux.
#[must_use]
pub fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat (Linux)");
    // Fields after the command name, which is in parentheses and may hold spaces; utime and
    // stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let after = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / 100.0
}
