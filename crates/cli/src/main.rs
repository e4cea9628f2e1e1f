//! `strata`: the command-line entry point. Parses arguments, runs the command, prints the
//! error chain and maps it to an exit code. All logic lives in the library crates.

mod bench;
mod cmd;
mod commands;
mod live;
mod logging;
mod process;
mod report;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    process::restore_sigpipe();
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
