//! One Python env process: started in its own process group with a parent-death signal,
//! driven by commands posted in its shared region, killed and reaped when it fails, hangs
//! or is dropped.
//!
//! Each command is a sequence number in the region's header and a byte on a socket, and
//! each answer the same the other way: a side that spins (for a short budget) sees the
//! number at once, a side asleep in `poll` is woken by the byte. Every command and every
//! answer sends its byte, so no wake-up can be lost to a race; stale bytes are drained.
//!
//! A Unix socket pair rather than an eventfd or futex: a process that dies closes its end,
//! so a crash (a segfault in a simulator) is seen at once as end-of-file instead of as a
//! timeout; and unlike a pipe, writing to a dead process's socket can be told not to raise
//! SIGPIPE (the `strata` binary restores SIGPIPE's default, which would kill the trainer).

use super::protocol::{self, Reply};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};
use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, Signal};

use super::region::Region;
use super::GymError;

/// The longest message a child may send: a layout or a traceback is far smaller.
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

/// The worker program, fed to `python -` on its stdin: the named wrappers' source, then
/// the serving loop's (which calls the wrappers' `apply_wrappers`).
const WORKER_PROGRAM: &str = concat!(
    include_str!("../../python/strata_gym_wrappers.py"),
    include_str!("../../python/strata_gym_worker.py")
);
/// How long a process that was asked to quit gets before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(2);
/// How long a killed process gets to be reaped before it is given up on (logged).
const REAP_WAIT: Duration = Duration::from_secs(5);

/// What to run: the interpreter and the program's arguments.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    /// The Python interpreter.
    pub(crate) python: PathBuf,
    /// Arguments after `python -`.
    pub(crate) args: Vec<String>,
}

/// A started env process and the owner's end of its socket.
pub(crate) struct EnvProcess {
    child: Child,
    /// Owner -> process: a wake-up byte per command (`S`tep, `R`eset, `Q`uit);
    /// process -> owner: a wake-up byte per answer (`K`, `E`), at start `K` or `E` and a
    /// traceback, or a describing process's length-prefixed description.
    socket: UnixStream,
    /// Its shared-memory region (none for a describing process).
    pub(crate) region: Option<Region>,
    /// Set once it failed: it is dead (killed and reaped) and answers nothing more.
    dead: bool,
    /// The sequence number of the last command posted.
    posted: u64,
    /// How long a wait spins on the region before it sleeps on the socket.
    spin: Duration,
    /// Commands waited for (stale replies are drained every so many).
    waits: u64,
}

/// Requests to the spawner thread: a command to start, and where to send the child.
type SpawnRequest = (Command, Sender<std::io::Result<Child>>);

/// Every env process is started by one long-lived thread, because Linux sends the
/// parent-death signal when the *thread* that forked the child ends: started from a worker
/// thread, a process would be killed when that thread is replaced. This thread lives as
/// long as the trainer, so its children die with the trainer and not before.
fn spawner() -> &'static Sender<SpawnRequest> {
    static SPAWNER: OnceLock<Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        // Capacity 1: callers wait their turn (for at most the spawn timeout).
        let (tx, rx) = bounded::<SpawnRequest>(1);
        std::thread::Builder::new()
            .name("strata-env-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("the env spawner thread starts");
        tx
    })
}

/// Starts a command through the spawner thread, waiting at most `timeout`.
fn spawn_command(command: Command, timeout: Duration) -> std::io::Result<Child> {
    let timed_out = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the env spawner did not start the process within {timeout:?}"),
        )
    };
    let (reply, answer) = bounded(1);
    spawner()
        .send_timeout((command, reply), timeout)
        .map_err(|_| timed_out())?;
    answer.recv_timeout(timeout).map_err(|_| timed_out())?
}

/// The thread-count variables of the math libraries NumPy and its neighbours load.
const MATH_THREADS: [&str; 4] = [
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
];

/// One math thread per env process unless the user chose otherwise: a process steps its
/// envs one after another, and a BLAS pool in each of them (OpenBLAS starts one thread a
/// core by default) would spin beside the trainer's own threads on the same cores.
fn single_threaded_math(command: &mut Command) {
    for name in MATH_THREADS {
        if std::env::var_os(name).is_none() {
            command.env(name, "1");
        }
    }
}

/// Writes all of `data` without raising SIGPIPE when the peer is gone.
fn send_all(socket: &UnixStream, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        match rustix::net::send(socket, data, rustix::net::SendFlags::NOSIGNAL) {
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

impl EnvProcess {
    /// Starts `python - ARGS --reply-fd S --cmd-fd S [--shm-fd M]` in a process group of
    /// its own (a terminal's Ctrl-C reaches the trainer only, which stops it in order)
    /// that is killed when the trainer dies, and feeds it the worker program on stdin.
    ///
    /// # Errors
    /// [`GymError::Spawn`] when the interpreter cannot be started.
    pub(crate) fn start(
        launch: &Launch,
        region: Option<Region>,
        timeout: Duration,
    ) -> Result<Self, GymError> {
        let spawn_error = |reason: String| GymError::Spawn {
            python: launch.python.display().to_string(),
            reason,
        };
        let io = |e: std::io::Error| spawn_error(e.to_string());
        let (socket, theirs) = UnixStream::pair().map_err(io)?;
        let (program, program_in) = UnixStream::pair().map_err(io)?;
        let mut args = launch.args.clone();
        let fd = theirs.as_raw_fd().to_string();
        args.extend(["--reply-fd".into(), fd.clone(), "--cmd-fd".into(), fd]);
        let inherited: Vec<i32> = std::iter::once(theirs.as_raw_fd())
            .chain(region.as_ref().map(|r| r.fd().as_raw_fd()))
            .collect();
        if let Some(r) = &region {
            args.extend(["--shm-fd".into(), r.fd().as_raw_fd().to_string()]);
        }
        let stderr = std::io::stderr().as_fd().try_clone_to_owned().map_err(io)?;
        let mut command = Command::new(&launch.python);
        command
            .arg("-")
            .args(&args)
            .stdin(Stdio::from(OwnedFd::from(program_in)))
            .stdout(Stdio::from(stderr))
            .process_group(0);
        single_threaded_math(&mut command);
        let parent = rustix::process::getpid();
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe system calls (prctl, getppid, fcntl), allocating nothing: its
        // errors are bare errno values (an `io::Error` from an errno holds no heap data).
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                // The trainer may have died before the signal was armed.
                if rustix::process::getppid() != Some(parent) {
                    // "No such process": the trainer exited (a message would allocate).
                    return Err(rustix::io::Errno::SRCH.into());
                }
                for &fd in &inherited {
                    let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
                }
                Ok(())
            });
        }
        let child = spawn_command(command, timeout).map_err(io)?;
        // The child's end is its own now: with ours closed, its death is end-of-file.
        drop(theirs);
        let fed = send_all(&program, WORKER_PROGRAM.as_bytes());
        drop(program);
        let mut process = EnvProcess {
            child,
            socket,
            region,
            dead: false,
            posted: 0,
            spin: Duration::ZERO,
            waits: 0,
        };
        if let Err(e) = fed {
            return Err(process.died(format!("took no program on stdin ({e})")));
        }
        Ok(process)
    }

    /// Lets waits spin up to `spin` (and the worker the same, waiting for a command) before
    /// sleeping on the socket: round trips of a few microseconds instead of two wake-ups,
    /// at the cost of that much CPU while waiting.
    pub(crate) fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
        if let Some(region) = &self.region {
            region.set_spin(u32::try_from(spin.as_nanos()).unwrap_or(u32::MAX));
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Posts a command: in the region (a spinning worker sees it there at once) and as a
    /// byte on the socket (which wakes a sleeping one; a spinning one drains it later).
    ///
    /// # Errors
    /// [`GymError::Exited`] when the process is gone.
    pub(crate) fn send(&mut self, command: protocol::Command) -> Result<(), GymError> {
        if self.dead {
            return Err(self.gone());
        }
        if let Some(region) = &self.region {
            self.posted = region.post(command);
        }
        match send_all(&self.socket, &[command.byte()]) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.died(format!("stopped reading commands ({e})"))),
        }
    }

    /// Waits at most `timeout` for the last command to be done: spinning on the region
    /// for up to the spin budget, then sleeping on the socket (whose end-of-file says the
    /// process died).
    ///
    /// # Errors
    /// [`GymError::Raised`] with the env's traceback, [`GymError::Exited`] when the
    /// process died, [`GymError::Hung`] when it did not answer in time (it is killed).
    pub(crate) fn wait(&mut self, timeout: Duration) -> Result<(), GymError> {
        if self.dead {
            return Err(self.gone());
        }
        let Some(region) = &self.region else {
            return self.wait_ready(timeout);
        };
        let (posted, spin) = (self.posted, self.spin);
        let started = Instant::now();
        let mut done = region.done() == posted;
        while !done && started.elapsed() < spin {
            std::hint::spin_loop();
            done = region.done() == posted;
        }
        let deadline = started + timeout;
        while !done {
            // Replies (one per command) wake us; those of commands seen done while
            // spinning are stale and only drained.
            self.drain(deadline)?;
            done = self.region.as_ref().expect("checked above").done() == posted;
        }
        self.waits += 1;
        let region = self.region.as_ref().expect("checked above");
        if region.failed() {
            return Err(GymError::Raised {
                traceback: region.error_text(),
            });
        }
        if self.waits.is_multiple_of(256) {
            // Keep stale wake-ups from filling the socket.
            self.drain(Instant::now())?;
        }
        Ok(())
    }

    /// Reads the wake-up bytes waiting (waiting for one until `deadline`; none when the
    /// deadline is now: only what is there); ends the process on end-of-file, or at a
    /// deadline passed while waiting.
    fn drain(&mut self, deadline: Instant) -> Result<(), GymError> {
        if deadline > Instant::now() {
            self.readable(deadline)?;
        } else if !self.ready_now()? {
            return Ok(());
        }
        let mut bytes = [0u8; 4096];
        match self.socket.read(&mut bytes) {
            Ok(0) => Err(self.died("closed its socket".into())),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(self.died(format!("socket failed ({e})"))),
        }
    }

    /// Whether the socket has something to read right now.
    fn ready_now(&mut self) -> Result<bool, GymError> {
        let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
        let now = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match rustix::event::poll(&mut fds, Some(&now)) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(self.died(format!("poll failed ({e})"))),
        }
    }

    /// Waits for the one-byte answer a process gives once it is ready (or could not make
    /// its envs).
    ///
    /// # Errors
    /// As [`EnvProcess::wait`].
    pub(crate) fn wait_ready(&mut self, timeout: Duration) -> Result<(), GymError> {
        if self.dead {
            return Err(self.gone());
        }
        let deadline = Instant::now() + timeout;
        let byte = self.read_byte(deadline)?;
        match byte.map(|b| (b, Reply::from_byte(b))) {
            Some((_, Some(Reply::Done))) => Ok(()),
            Some((_, Some(Reply::Failed))) => {
                let text = self.read_text(deadline)?;
                Err(GymError::Raised { traceback: text })
            }
            Some((other, None)) => {
                self.kill();
                Err(GymError::Protocol(format!(
                    "unexpected reply byte {other:#04x} from pid {}",
                    self.pid()
                )))
            }
            None => Err(self.died("closed its socket".into())),
        }
    }

    /// Reads one length-prefixed message (a description, or an error's text).
    pub(crate) fn read_message(&mut self, timeout: Duration) -> Result<Vec<u8>, GymError> {
        let deadline = Instant::now() + timeout;
        let mut len = [0u8; 4];
        self.read_exact(&mut len, deadline)?;
        let len = u32::from_le_bytes(len) as usize;
        // A child that misbehaves must not make the trainer allocate gigabytes.
        if len > MAX_MESSAGE {
            return Err(GymError::Protocol(format!(
                "announced a message of {len} bytes (at most {MAX_MESSAGE})"
            )));
        }
        let mut data = vec![0u8; len];
        self.read_exact(&mut data, deadline)?;
        Ok(data)
    }

    fn read_text(&mut self, deadline: Instant) -> Result<String, GymError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        let data = self.read_message(timeout.max(Duration::from_secs(1)))?;
        Ok(String::from_utf8_lossy(&data).into_owned())
    }

    fn read_exact(&mut self, buf: &mut [u8], deadline: Instant) -> Result<(), GymError> {
        let mut filled = 0;
        while filled < buf.len() {
            self.readable(deadline)?;
            match self.socket.read(&mut buf[filled..]) {
                Ok(0) => return Err(self.died("closed its socket mid-message".into())),
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.died(format!("socket failed ({e})"))),
            }
        }
        Ok(())
    }

    /// One byte, or `None` at end-of-file.
    fn read_byte(&mut self, deadline: Instant) -> Result<Option<u8>, GymError> {
        let mut byte = [0u8; 1];
        loop {
            self.readable(deadline)?;
            match self.socket.read(&mut byte) {
                Ok(0) => return Ok(None),
                Ok(_) => return Ok(Some(byte[0])),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.died(format!("socket failed ({e})"))),
            }
        }
    }

    /// Waits until the socket has data or is closed; kills the process at `deadline`.
    fn readable(&mut self, deadline: Instant) -> Result<(), GymError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout =
                rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec {
                    tv_sec: i64::MAX,
                    tv_nsec: 0,
                });
            let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) => {
                    let pid = self.pid();
                    self.kill();
                    return Err(GymError::Hung {
                        pid,
                        waited: left.max(Duration::from_millis(1)),
                    });
                }
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(self.died(format!("poll failed ({e})"))),
            }
        }
    }

    /// Marks the process dead after it stopped answering: kills what is left of its
    /// group, reaps it and says how it ended.
    fn died(&mut self, what: String) -> GymError {
        let pid = self.pid();
        let status = self.kill();
        GymError::Exited {
            pid,
            status: format!("{what}; {status}"),
        }
    }

    /// The error every call after a failure returns.
    fn gone(&self) -> GymError {
        GymError::Exited {
            pid: self.pid(),
            status: "was stopped after an earlier failure".into(),
        }
    }

    /// Kills the process group (the env's own children too) and reaps the process;
    /// returns how it ended.
    fn kill(&mut self) -> String {
        self.dead = true;
        let pid = Pid::from_raw(self.child.id() as i32).expect("a child's pid is positive");
        // The group may be gone already; that is the point.
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        self.reap(REAP_WAIT)
    }

    /// Waits at most `wait` for the process to exit; describes its status.
    fn reap(&mut self, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return describe_status(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(None) => {
                    tracing::error!(
                        component = "env",
                        pid = self.child.id(),
                        ?wait,
                        "env process still running after SIGKILL; left to the OS"
                    );
                    return format!("still running {wait:?} after SIGKILL");
                }
                Err(e) => return format!("could not be reaped ({e})"),
            }
        }
    }

    /// Asks the process to quit (closing its envs), then kills what is left of its group
    /// and reaps it. Called for every process of a vector before any is waited on.
    pub(crate) fn ask_to_quit(&mut self) {
        if !self.dead {
            if let Some(region) = &self.region {
                self.posted = region.post(protocol::Command::Quit);
            }
            let _ = send_all(&self.socket, &[protocol::Command::Quit.byte()]);
        }
    }

    /// Waits up to the grace period for a process asked to quit, then kills its group.
    pub(crate) fn finish(&mut self) {
        if self.dead {
            return;
        }
        let deadline = Instant::now() + QUIT_GRACE;
        // End-of-file on the socket: it exited.
        let mut byte = [0u8; 64];
        while self.readable(deadline).is_ok() {
            match self.socket.read(&mut byte) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if !self.dead {
            self.kill();
        }
    }
}

impl Drop for EnvProcess {
    fn drop(&mut self) {
        self.ask_to_quit();
        self.finish();
    }
}

/// "exited with status 1", "was killed by signal 11 (SIGSEGV)".
fn describe_status(status: std::process::ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    let signal = status.signal().unwrap_or(0);
    let name = match signal {
        6 => " (SIGABRT)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        15 => " (SIGTERM)",
        7 => " (SIGBUS)",
        8 => " (SIGFPE)",
        _ => "",
    };
    format!("was killed by signal {signal}{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_on(command: &Command, name: &str) -> Option<String> {
        command
            .get_envs()
            .find(|(key, _)| *key == name)
            .and_then(|(_, value)| value.map(|v| v.to_string_lossy().into_owned()))
    }

    #[test]
    fn env_processes_get_one_math_thread_unless_the_user_chose() {
        let mut command = Command::new("python3");
        single_threaded_math(&mut command);
        for name in MATH_THREADS {
            match std::env::var_os(name) {
                // The user's choice is inherited, not overwritten.
                Some(_) => assert_eq!(set_on(&command, name), None, "{name}"),
                None => assert_eq!(set_on(&command, name).as_deref(), Some("1"), "{name}"),
            }
        }
    }
}
