//! The process and its disk, read at scrape time: resident memory and CPU time (Linux `/proc/self/stat`), and
//! the free and total bytes of the data directory's file system (`statvfs`).

use std::path::Path;

/// Resident memory in bytes and CPU seconds (user + system), or `None` where `/proc` is not there.
pub fn rss_and_cpu() -> Option<(u64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command (which is in parentheses and may hold spaces): state is field 3.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15, rss (pages) field 24: indexes 11, 12 and 21 after the command.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let rss_pages: u64 = fields.get(21)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    Some((
        rss_pages.saturating_mul(page as u64),
        (utime + stime) as f64 / ticks as f64,
    ))
}

/// (free bytes available to this process, total bytes) of the file system holding `dir`.
pub fn disk_free_and_total(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is a valid NUL-terminated string; `out` is written by statvfs before it is read.
    let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut out) } != 0 {
        return None;
    }
    let block = out.f_frsize as u64;
    Some((
        (out.f_bavail as u64).saturating_mul(block),
        (out.f_blocks as u64).saturating_mul(block),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_memory_and_a_disk() {
        let (rss, cpu) = super::rss_and_cpu().expect("/proc/self/stat");
        assert!(rss > 1 << 20, "rss {rss}");
        assert!(cpu >= 0.0);
        let (free, total) = super::disk_free_and_total(std::path::Path::new(".")).unwrap();
        assert!(total > 0 && free <= total);
    }
}
