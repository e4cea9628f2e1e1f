//! Process tuning, in one place: what the `strata` process sets about itself (signals,
//! the allocator) before its commands run.

/// Rust ignores SIGPIPE, so printing to a closed pipe (`strata ledger summary | head`)
/// panics; a command-line tool should end quietly instead, as Unix tools do.
pub fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Hands the memory recovery freed (the journal's replay) back to the system, so that a
/// restarted gateway holds about what its live state takes.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Tunes glibc's malloc for a process that runs for weeks. Arenas are capped at one per
/// core (its default is eight per core): a gateway's requests run on many threads, and
/// memory freed in one thread's arena is not reused by another's, so under a 16-agent
/// fleet the resident size kept climbing (460 MB after two minutes) where the live heap
/// was under 200 MB; capped, it levels near 250 MB. And blocks of 1 MiB or more are always
/// mapped on their own (glibc otherwise raises that threshold after freeing one, up to
/// 32 MiB): the journal's snapshot clones and compaction's buffers, tens of megabytes for
/// a moment, then go back to the system instead of fragmenting the heap.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism()
            .map_or(2, usize::from)
            .max(2);
        // SAFETY: mallopt only sets allocator parameters; called before the gateway's
        // threads start.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, i32::try_from(cores).unwrap_or(i32::MAX));
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        }
    }
}
