//! NUMA nodes from sysfs: which node an RDMA device hangs off, and which
//! node the calling thread runs on now (for the NUMA-local rail policy).

/// The NUMA node of RDMA device `name`, if sysfs says (`-1`: none).
pub(crate) fn device_node(name: &str) -> Option<u32> {
    let text =
        std::fs::read_to_string(format!("/sys/class/infiniband/{name}/device/numa_node")).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// The NUMA node of the CPU this thread last ran on: the CPU from
/// `/proc/thread-self/stat` (field 39), its node from sysfs.
pub(crate) fn current_node() -> Option<u32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // The command may hold spaces and parentheses: fields start after the
    // last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after the command; the CPU is field 39.
    let cpu: u32 = after.split_whitespace().nth(36)?.parse().ok()?;
    let dir = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}")).ok()?;
    dir.flatten()
        .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_thread_runs_on_a_node_and_unknown_devices_have_none() {
        // Every Linux host with sysfs has node 0 at least.
        assert!(current_node().is_some());
        assert_eq!(device_node("no-such-device"), None);
    }
}
