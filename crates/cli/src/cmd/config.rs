//! `strata config show`: the effective config as TOML, with what made it (the preset, the
//! image encoders, the recurrent core and its sequence length, the config's hash) as
//! comments.

use anyhow::Result;

use crate::cmd::config_args::{build_config, ConfigArgs};

/// Prints the effective config of `args`.
///
/// # Errors
/// A config that cannot be built (a bad key, value or file).
pub fn show(args: &ConfigArgs) -> Result<()> {
    let config = build_config(args)?;
    // TOML comments: the output stays a config file `--config` reads.
    if let Some(origin) = strata_runtime::preset_origin(&config.env.name) {
        comment(&format!("preset: {origin}"));
    }
    if let Some(line) = encoder_line(&config) {
        comment(&format!("encoder: {line}"));
    }
    if let Some(line) = config.network.describe_core() {
        comment(&format!("core: {line}"));
        comment(&format!("sequences: {}", config.ppo.describe_sequences()));
    }
    // The hash line is the one a run directory's `config.toml` opens with.
    let header = strata_runtime::RunLayout::hash_header(&config.config_hash());
    if config.env.gym_target().is_some() {
        println!("{header} (before the run records the env's layout, which it hashes too)");
    } else {
        println!("{header}");
    }
    print!("{}", config.to_toml());
    Ok(())
}

/// Prints `text` as TOML comments, every line of it: a message with a line break (an
/// env that could not be described says how to fix it on a second line) must not end
/// the comment and break the file, nor may a control character TOML refuses in one.
fn comment(text: &str) {
    for line in text.lines() {
        let line: String = line
            .chars()
            .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
            .collect();
        println!("# {line}");
    }
}

/// What encodes a `gym:` env's images under `network.encoder`, for `config show` (which
/// asks Python what the env looks like); `None` for envs without images.
fn encoder_line(config: &strata_runtime::RunConfig) -> Option<String> {
    config.env.gym_target()?;
    let mut resolved = config.clone();
    if let Err(e) = strata_runtime::resolve_env(&mut resolved) {
        return Some(format!("not known: the env could not be described ({e})"));
    }
    match strata_runtime::describe_encoders(&resolved) {
        Ok(encoders) if encoders.is_empty() => None,
        Ok(encoders) => Some(format!(
            "{} (network.encoder = \"{}\")",
            encoders.join(", "),
            config.network.encoder.name()
        )),
        Err(e) => Some(e.to_string()),
    }
}
