//! Structured logs on stderr: every event carries a global, monotonic sequence number (so
//! interleaved threads can be put back in order) before tracing's usual fields, among which
//! each component's `component` id.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Installs the subscriber: `RUST_LOG` if set, else `default_level` for Strata's crates.
pub fn init(default_level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "warn,strata={default_level},strata_runtime={default_level}"
        ))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .event_format(Sequenced(Format::default().with_thread_names(true)))
        .try_init();
}
