//! `strata`: the command-line entry point. Parses arguments, runs the command, prints the
//! error chain and maps it to an exit code. All logic lives in the library crates.

mod bench;
mod bench_cluster;
mod bench_cnn;
mod bench_core;
mod bench_gateway;
mod bench_gym;
mod bench_ledger;
mod bench_ledger_reads;
mod bench_soak;
mod cluster_cmd;
mod commands;
mod config_args;
mod env_cmd;
mod eval_cmd;
mod gateway_cmd;
mod ledger_cmd;
mod live_server;
mod logging;
mod monitor;
mod nats_args;
mod python_program;
mod report;
mod train_cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = commands::Cli::parse();
    logging::init(cli.log_level(), !cli.full_screen());
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            // Many errors name their cause in their own message; a cause already said
            // is not said twice.
            let mut said = err.to_string();
            for cause in err.chain().skip(1) {
                let text = cause.to_string();
                if !said.contains(&text) {
                    eprintln!("  caused by: {text}");
                    said = text;
                }
            }
            ExitCode::from(2)
        }
    }
}

/// Rust ignores SIGPIPE, so printing to a closed pipe (`strata ledger summary | head`)
/// panics; a command-line tool should end quietly instead, as Unix tools do.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
