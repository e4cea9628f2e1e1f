//! A real nats-server and `strata` processes for the tests that span processes over NATS
//! (the training cluster, gateways feeding one learner). Included by path after
//! `support/optional.rs` and `support/procs.rs`.

// Each test binary that includes this file uses its own subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::procs::wait_until;

/// One scenario at a time: they time processes against each other on two cores.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// What each scenario starts with: its turn, a directory, a server; none without a
/// nats-server (the test is skipped, unless `STRATA_REQUIRE_NATS` is set).
pub fn scenario() -> Option<(std::sync::MutexGuard<'static, ()>, tempfile::TempDir, Nats)> {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = super::optional::nats_server()?;
    let tmp = tempfile::tempdir().unwrap();
    let nats = Nats::start(&server, tmp.path());
    Some((serial, tmp, nats))
}

/// A port free now on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A nats-server with JetStream on, its store on disk and synced at every write.
pub struct Nats {
    binary: String,
    /// More of the server's config (TLS, authorization), after the listener and JetStream.
    extra: String,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Nats {
    pub fn start(binary: &str, dir: &Path) -> Nats {
        Nats::start_with(binary, dir, "")
    }

    /// A server whose config also holds `extra` (a `tls {}` or `authorization {}` block).
    pub fn start_with(binary: &str, dir: &Path, extra: &str) -> Nats {
        let mut nats = Nats {
            binary: binary.into(),
            extra: extra.into(),
            port: free_port(),
            dir: dir.to_path_buf(),
            child: None,
        };
        nats.launch();
        nats
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn launch(&mut self) {
        let config = self.dir.join("nats.conf");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{}\nmax_payload: 8MB\njetstream {{\n  store_dir: {:?}\n  sync_interval: always\n}}\n{}\n",
                self.port,
                self.dir.join("store"),
                self.extra
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.dir.join("nats.log")).unwrap();
        let child = Command::new(&self.binary)
            .args(["-c", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_until("nats-server to listen", Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A `strata` process, killed if the test ends without it.
pub struct Strata {
    child: Option<Child>,
    log: PathBuf,
}

impl Strata {
    pub fn start(args: &[&str], log: &Path) -> Strata {
        use std::os::unix::process::CommandExt;
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(args)
            .args(["--log-level", "info"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        Strata {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling a process this test started.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }

    pub fn kill9(&mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// Waits for the exit; its status and stdout.
    pub fn finish(&mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let mut c = self.child.take().unwrap();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                let mut out = String::new();
                std::io::Read::read_to_string(c.stdout.as_mut().unwrap(), &mut out).unwrap();
                return (status, out);
            }
            if Instant::now() >= deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!(
                    "{} did not exit within {limit:?}:\n{}",
                    self.log.display(),
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Strata {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `strata serve --nats` gateway of run `run` in `dir` (`--release manual` unless
/// `extra` says), and its URL.
pub fn gateway(nats: &Nats, run: &str, dir: &Path, extra: &[&str]) -> (Strata, String) {
    std::fs::create_dir_all(dir).unwrap();
    let url = nats.url();
    let mut args = vec![
        "serve",
        "--nats",
        &url,
        "--run",
        run,
        "--cooldown-secs",
        "0",
    ];
    if !extra.contains(&"--release") {
        args.extend(["--release", "manual"]);
    }
    if !extra.contains(&"--addr") {
        args.extend(["--addr", "127.0.0.1:0"]);
    }
    args.extend(["--dir", dir.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let address = dir.join("address");
    // A restarted gateway writes its address anew.
    let _ = std::fs::remove_file(&address);
    let g = Strata::start(&args, &dir.join("serve.log"));
    wait_until("the gateway to listen", Duration::from_secs(60), || {
        std::fs::read_to_string(&address).is_ok_and(|a| a.ends_with('\n'))
    });
    (
        g,
        std::fs::read_to_string(&address)
            .unwrap()
            .trim()
            .to_string(),
    )
}

/// A client with `dir`'s operator token.
pub fn operator(dir: &Path, url: &str) -> strata_gateway::Client {
    let tokens: strata_gateway::TokensFile =
        serde_json::from_slice(&std::fs::read(dir.join("tokens.json")).unwrap()).unwrap();
    strata_gateway::Client::new(url, tokens.operator())
}
