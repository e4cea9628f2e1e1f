//! Structured logs on stderr: every event carries a global, monotonic sequence number (so
//! interleaved threads can be put back in order) before tracing's usual fields, among which
//! each component's `component` id.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

struct Sequenced(Format<Full>);

impl<S, N> FormatEvent<S, N> for Sequenced
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "seq={} ", SEQUENCE.fetch_add(1, Ordering::Relaxed))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// Where log lines go: stderr, or a file once [`redirect_to`] was called (while a
/// full-screen monitor owns the terminal).
static LOG_FILE: Mutex<Option<File>> = Mutex::new(None);

struct LogTarget;

impl Write for LogTarget {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match LOG_FILE.lock().as_mut() {
            Some(file) => file.write(buf),
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match LOG_FILE.lock().as_mut() {
            Some(file) => file.flush(),
            None => io::stderr().flush(),
        }
    }
}

/// Sends log lines to `path` (appending) from now on.
///
/// # Errors
/// When the file cannot be opened.
pub fn redirect_to(path: &Path) -> io::Result<()> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    *LOG_FILE.lock() = Some(file);
    Ok(())
}

/// Installs the subscriber: `RUST_LOG` if set, else `default_level` for Strata's crates.
/// Colours only when stderr is a terminal that will show the lines (`to_terminal`).
pub fn init(default_level: &str, to_terminal: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "warn,strata={default_level},strata_runtime={default_level}"
        ))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogTarget)
        .with_ansi(to_terminal && io::IsTerminal::is_terminal(&io::stderr()))
        .event_format(Sequenced(Format::default().with_thread_names(true)))
        .try_init();
}
