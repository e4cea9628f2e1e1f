//! [`Stop`]: a request to stop that wakes whatever is waiting, instead of being noticed
//! at the next look.
//!
//! A thread pausing ([`Stop::pause`]), a NATS call in flight (through [`Stop::raised`])
//! and anything registered with [`Stop::on_raise`] (a hosted worker's `Exit`, a child
//! stop) all hear a raise at once. A raise is for good: a stop never lowers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

type Hook = Box<dyn Fn() + Send + Sync>;

/// A stop request shared by every thread it should reach (clones share it).
#[derive(Clone)]
pub struct Stop {
    inner: Arc<Inner>,
}

struct Inner {
    raised: AtomicBool,
    /// Paired with `pausing` for threads in [`Stop::pause`].
    pausing: Mutex<()>,
    woken: Condvar,
    /// For async waits ([`Stop::raised`]).
    signal: tokio::sync::watch::Sender<bool>,
    hooks: Mutex<Vec<(u64, Hook)>>,
    next_hook: AtomicU64,
}

impl Default for Stop {
    fn default() -> Self {
        Stop::new()
    }
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stop")
            .field("raised", &self.is_raised())
            .finish()
    }
}

impl Stop {
    /// A stop not raised yet.
    pub fn new() -> Stop {
        Stop {
            inner: Arc::new(Inner {
                raised: AtomicBool::new(false),
                pausing: Mutex::new(()),
                woken: Condvar::new(),
                signal: tokio::sync::watch::Sender::new(false),
                hooks: Mutex::new(Vec::new()),
                next_hook: AtomicU64::new(0),
            }),
        }
    }

    /// Raises it: wakes every pause and wait on it and runs its hooks (once).
    pub fn raise(&self) {
        if self.inner.raised.swap(true, Ordering::SeqCst) {
            return;
        }
        {
            // Taken under the pause lock, so a thread between its check and its wait
            // cannot miss the notification.
            let _guard = self
                .inner
                .pausing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.inner.woken.notify_all();
        }
        self.inner.signal.send_replace(true);
        let hooks = std::mem::take(
            &mut *self
                .inner
                .hooks
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (_, hook) in hooks {
            hook();
        }
    }

    /// Whether it has been raised.
    pub fn is_raised(&self) -> bool {
        self.inner.raised.load(Ordering::SeqCst)
    }

    /// Waits `wait`, or less when raised meanwhile; whether it is raised.
    pub fn pause(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut guard = self
            .inner
            .pausing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while !self.is_raised() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            guard = self
                .inner
                .woken
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        self.is_raised()
    }

    /// Completes when it is raised (at once when it already is).
    pub(crate) async fn raised(&self) {
        let mut watch = self.inner.signal.subscribe();
        let _ = watch.wait_for(|raised| *raised).await;
    }

    /// Runs `hook` when it is raised (at once when it already is), unless the returned
    /// guard is dropped first.
    pub(crate) fn on_raise(&self, hook: impl Fn() + Send + Sync + 'static) -> OnRaise {
        let id = self.inner.next_hook.fetch_add(1, Ordering::Relaxed);
        {
            let mut hooks = self
                .inner
                .hooks
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !self.is_raised() {
                hooks.push((id, Box::new(hook)));
                return OnRaise {
                    stop: self.clone(),
                    id,
                };
            }
        }
        hook();
        OnRaise {
            stop: self.clone(),
            id,
        }
    }

    /// A stop of its own that is also raised when this one is (for as long as the child
    /// lives): one assignment, one proxy.
    pub(crate) fn child(&self) -> ChildStop {
        let stop = Stop::new();
        let raise = stop.clone();
        let parent = self.on_raise(move || raise.raise());
        ChildStop {
            stop,
            _parent: parent,
        }
    }
}

/// A hook registered with [`Stop::on_raise`]; dropping it unregisters the hook.
pub(crate) struct OnRaise {
    stop: Stop,
    id: u64,
}

impl Drop for OnRaise {
    fn drop(&mut self) {
        self.stop
            .inner
            .hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.id);
    }
}

/// A stop raised with its parent or on its own ([`Stop::child`]).
pub(crate) struct ChildStop {
    stop: Stop,
    _parent: OnRaise,
}

impl std::ops::Deref for ChildStop {
    type Target = Stop;
    fn deref(&self) -> &Stop {
        &self.stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raise_wakes_a_pause_at_once() {
        let stop = Stop::new();
        let raiser = stop.clone();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            raiser.raise();
        });
        assert!(stop.pause(Duration::from_secs(30)));
        assert!(started.elapsed() < Duration::from_secs(10));
        thread.join().unwrap();
        // Raised for good: later pauses return at once.
        assert!(stop.pause(Duration::from_secs(30)));
    }

    #[test]
    fn a_pause_without_a_raise_waits_its_time() {
        let stop = Stop::new();
        let started = Instant::now();
        assert!(!stop.pause(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn hooks_run_once_and_unregister_when_dropped() {
        let stop = Stop::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let kept = {
            let tx = tx.clone();
            stop.on_raise(move || tx.send("kept").unwrap())
        };
        drop(stop.on_raise(move || tx.send("dropped").unwrap()));
        stop.raise();
        stop.raise();
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), ["kept"]);
        drop(kept);
        // Registered after the raise: runs at once.
        let (tx, rx) = std::sync::mpsc::channel();
        let _late = stop.on_raise(move || tx.send(()).unwrap());
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_child_hears_its_parent_but_not_the_other_way() {
        let parent = Stop::new();
        let child = parent.child();
        child.raise();
        assert!(!parent.is_raised());
        let other = parent.child();
        parent.raise();
        assert!(other.is_raised());
    }

    #[test]
    fn an_async_wait_completes_on_a_raise() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let stop = Stop::new();
        let raiser = stop.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            raiser.raise();
        });
        let heard = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(30), stop.raised()).await });
        assert!(heard.is_ok());
        thread.join().unwrap();
    }
}
