//! The learner's thread pool, joined on drop: rayon's own pool lets its threads finish in
//! the background, but a clean stop must leave no thread running, so we spawn the pool's
//! threads ourselves and keep their handles.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::LearnerError;

/// A rayon pool whose threads are joined (within a bound) when it is dropped.
pub struct LearnerPool {
    pool: Option<rayon::ThreadPool>,
    handles: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl LearnerPool {
    /// `threads` learner threads, thread `i` pinned to `pin_cpus[(first_pin + i) % len]`
    /// when pins are given.
    ///
    /// # Errors
    /// [`LearnerError::Thread`] when the OS cannot start them.
    pub fn new(threads: usize, pin_cpus: &[usize], first_pin: usize) -> Result<Self, LearnerError> {
        let handles = Arc::new(Mutex::new(Vec::with_capacity(threads)));
        let spawned = Arc::clone(&handles);
        let pins = pin_cpus.to_vec();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .spawn_handler(move |thread| {
                let i = thread.index();
                let pin = (!pins.is_empty()).then(|| pins[(first_pin + i) % pins.len()]);
                let handle = std::thread::Builder::new()
                    .name(format!("strata-learner-{i}"))
                    .spawn(move || {
                        if let Some(cpu) = pin {
                            pin_current_thread(cpu, "learner");
                        }
                        thread.run();
                    })?;
                spawned.lock().push(handle);
                Ok(())
            })
            .build()
            .map_err(|e| LearnerError::thread("the learner threads", e))?;
        Ok(LearnerPool {
            pool: Some(pool),
            handles,
        })
    }

    /// Runs `f` inside the pool (its `rayon::join`s use the pool's threads).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.as_ref().expect("present until drop").install(f)
    }
}

impl Drop for LearnerPool {
    fn drop(&mut self) {
        // Dropping the pool tells its threads to finish; then wait for each (bounded).
        drop(self.pool.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        for handle in self.handles.lock().drain(..) {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if handle.is_finished() {
                let _ = handle.join();
            } else {
                tracing::error!(
                    component = "learner",
                    "a learner thread did not stop within 5 s"
                );
            }
        }
    }
}

/// Pins the calling thread to `cpu` (logged, not fatal, when the OS refuses).
pub fn pin_current_thread(cpu: usize, component: &str) {
    let pinned = core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
    if !pinned {
        tracing::warn!(component, cpu, "could not pin thread to CPU");
    }
}
