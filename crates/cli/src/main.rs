//! `strata`: the command-line entry point. Parses arguments, runs the command, prints the
//! error chain and maps it to an exit code. All logic lives in the library crates.

mod bench;
mod bench_ledger;
mod commands;
mod ledger_cmd;
mod logging;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = commands::Cli::parse();
    logging::init(cli.log_level());
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(2)
        }
    }
}
