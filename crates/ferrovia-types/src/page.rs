//! The system page size.

/// The system page size. Registrations with an explicit RDMA address need
/// it: the kernel requires the address and the RDMA address to share their
/// offset within a page.
#[allow(unsafe_code)]
pub fn page_size() -> usize {
    // SAFETY: sysconf takes an integer name and has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v)
        .ok()
        .filter(|&p| p.is_power_of_two())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_size_is_a_power_of_two_of_at_least_4_kib() {
        let p = super::page_size();
        assert!(p.is_power_of_two() && p >= 4096, "{p}");
    }
}
