//! Heartbeats and the watchdog. Every component beats while it works and says what it is
//! doing; the watchdog thread reports any component silent for too long (which, what it was
//! doing, for how long). The learner restarts silent workers itself: it owns the wiring.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a component is doing at its last beat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Activity {
    /// Starting up.
    Starting = 0,
    /// Stepping envs and running inference.
    Collecting = 1,
    /// Waiting for a policy version.
    WaitingForPolicy = 2,
    /// Waiting for a free buffer slot (back-pressure).
    WaitingForSlot = 3,
    /// Waiting for fragments.
    WaitingForFragments = 4,
    /// Running the PPO update.
    Learning = 5,
    /// Stopped.
    Stopped = 6,
    /// A worker run elsewhere that no process has taken yet (nothing to restart).
    AwaitingProcess = 7,
}

impl Activity {
    /// The activity a byte names (what [`Activity`] `as u8` gives; unknown: starting), for
    /// activities reported from another process.
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => Activity::Collecting,
            2 => Activity::WaitingForPolicy,
            3 => Activity::WaitingForSlot,
            4 => Activity::WaitingForFragments,
            5 => Activity::Learning,
            6 => Activity::Stopped,
            7 => Activity::AwaitingProcess,
            _ => Activity::Starting,
        }
    }

    /// In words, for logs.
    pub fn describe(self) -> &'static str {
        match self {
            Activity::Starting => "starting",
            Activity::Collecting => "stepping envs",
            Activity::WaitingForPolicy => "waiting for a policy version",
            Activity::WaitingForSlot => "waiting for a free buffer slot",
            Activity::WaitingForFragments => "waiting for fragments",
            Activity::Learning => "learning",
            Activity::Stopped => "stopped",
            Activity::AwaitingProcess => "waiting for a worker process to take it",
        }
    }
}

/// One component's pulse.
#[derive(Debug)]
pub struct Heartbeat {
    /// Component name (`worker-0`, `learner`).
    pub name: String,
    epoch: Instant,
    last_ms: AtomicU64,
    activity: AtomicU8,
}

impl Heartbeat {
    /// A heartbeat that has just beaten.
    pub fn new(name: impl Into<String>, epoch: Instant) -> Arc<Self> {
        let h = Arc::new(Heartbeat {
            name: name.into(),
            epoch,
            last_ms: AtomicU64::new(0),
            activity: AtomicU8::new(Activity::Starting as u8),
        });
        h.beat(Activity::Starting);
        h
    }

    /// Records life and the current activity (two relaxed stores: cheap enough per step).
    #[inline]
    pub fn beat(&self, activity: Activity) {
        self.last_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.activity.store(activity as u8, Ordering::Relaxed);
    }

    /// Time since the last beat, and what the component was doing then.
    pub fn silence(&self) -> (Duration, Activity) {
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_ms.load(Ordering::Relaxed);
        (
            Duration::from_millis(now.saturating_sub(last)),
            Activity::from_u8(self.activity.load(Ordering::Relaxed)),
        )
    }
}

/// The watchdog thread: checks every heartbeat twice a second and logs each component that
/// has been silent longer than `silent_after` (once per silence).
pub struct Watchdog {
    /// Dropping it closes the channel, which stops the thread at once.
    stop: Option<crossbeam_channel::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching `beats` (a shared, replaceable list).
    ///
    /// # Errors
    /// When the OS cannot start a thread.
    pub fn start(
        beats: Arc<parking_lot::Mutex<Vec<Arc<Heartbeat>>>>,
        silent_after: Duration,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let handle = std::thread::Builder::new().name("strata-watchdog".into()).spawn(move || {
            let mut reported: Vec<String> = Vec::new();
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(500))
            {
                let beats = beats.lock().clone();
                for b in beats {
                    let (silence, activity) = b.silence();
                    let silent = silence > silent_after && activity != Activity::Stopped;
                    let known = reported.contains(&b.name);
                    if silent && !known {
                        tracing::warn!(
                            component = "watchdog",
                            silent_component = %b.name,
                            activity = activity.describe(),
                            silent_for = ?silence,
                            "component is silent"
                        );
                        reported.push(b.name.clone());
                    } else if !silent && known {
                        tracing::info!(component = "watchdog", recovered = %b.name, "component is beating again");
                        reported.retain(|n| n != &b.name);
                    }
                }
            }
        })?;
        Ok(Watchdog {
            stop: Some(stop),
            handle: Some(handle),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_grows_until_the_next_beat() {
        let h = Heartbeat::new("worker-0", Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let (silence, activity) = h.silence();
        assert!(silence >= Duration::from_millis(25));
        assert_eq!(activity, Activity::Starting);
        h.beat(Activity::Collecting);
        let (silence, activity) = h.silence();
        assert!(silence < Duration::from_millis(25));
        assert_eq!(activity, Activity::Collecting);
    }
}
