//! `strata env`: the built-in envs as a table, and replaying actions from a given state.

use std::fs;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

/// `strata env` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum EnvCommand {
    /// List built-in environments (and how to name a Gymnasium one).
    List,
    /// Start from a given state, apply given actions, print each step as a JSON line.
    Rollout(RolloutArgs),
}

#[derive(Args, Debug)]
pub(crate) struct RolloutArgs {
    /// Built-in env name.
    #[arg(long)]
    env: String,
    /// Start state as a JSON array (the env's internal state, e.g. CartPole's
    /// [x, x_dot, theta, theta_dot]).
    #[arg(long)]
    state: String,
    /// File of actions: a JSON array (numbers, or arrays for multi-dimensional actions) or
    /// whitespace-separated numbers.
    #[arg(long)]
    actions: PathBuf,
}

/// Runs an `strata env` subcommand.
pub(crate) fn run(command: EnvCommand) -> Result<()> {
    match command {
        EnvCommand::List => list(),
        EnvCommand::Rollout(args) => rollout(args),
    }
}

/// The built-in envs, their Gymnasium twins and spaces, as a table.
fn list() -> Result<()> {
    let mut rows = vec![[
        "name".to_string(),
        "Gymnasium twin".into(),
        "observation".into(),
        "action".into(),
        "time limit".into(),
        "solved at".into(),
    ]];
    for name in strata_env::env_names() {
        let spec = strata_env::spec_for(name)?;
        rows.push([
            name.to_string(),
            spec.gymnasium_id.clone(),
            spec.observation_space.to_string(),
            spec.action_space.to_string(),
            spec.max_episode_steps.to_string(),
            spec.reward_threshold.to_string(),
        ]);
    }
    let width = |c: usize| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..6).map(width).collect();
    for r in &rows {
        println!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:>w4$}  {:>w5$}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
            w4 = widths[4],
            w5 = widths[5],
        );
    }
    println!(
        "\nGymnasium envs run in Python worker processes: --env gym:ID (any registered id, \
             gym:module:Env-vN, or a factory gym:module:make_env). Tuned presets: {} and the \
             classic-control twins of the envs above (gym:CartPole-v1, ...). Python: \
             runtime.python, else $STRATA_PYTHON, else python3.",
        strata_runtime::GYM_PRESETS
            .iter()
            .map(|id| format!("gym:{id}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// Parses an actions file: a JSON array of numbers or arrays, or whitespace-separated numbers.
fn parse_actions(text: &str, action_dim: usize) -> Result<Vec<Vec<f32>>> {
    let rows: Vec<Vec<f32>> = if text.trim_start().starts_with('[') {
        let value: serde_json::Value =
            serde_json::from_str(text).context("actions file is not valid JSON")?;
        let items = value.as_array().context("actions JSON must be an array")?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                serde_json::Value::Number(n) => Ok(vec![n.as_f64().unwrap_or(f64::NAN) as f32]),
                serde_json::Value::Array(a) => a
                    .iter()
                    .map(|x| {
                        x.as_f64()
                            .map(|v| v as f32)
                            .with_context(|| format!("action {i}: `{x}` is not a number"))
                    })
                    .collect(),
                other => bail!("action {i}: `{other}` is neither a number nor an array"),
            })
            .collect::<Result<_>>()?
    } else {
        text.split_whitespace()
            .enumerate()
            .map(|(i, w)| {
                w.parse::<f32>()
                    .map(|v| vec![v])
                    .with_context(|| format!("action {i}: `{w}` is not a number"))
            })
            .collect::<Result<_>>()?
    };
    if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| r.len() != action_dim) {
        bail!(
            "action {i} has {} values, the env takes {action_dim}",
            row.len()
        );
    }
    Ok(rows)
}

fn rollout(args: RolloutArgs) -> Result<()> {
    let mut env = strata_env::make_env(&args.env)?;
    let spec = env.spec();
    let state: Vec<f64> =
        serde_json::from_str(&args.state).context("--state must be a JSON array of numbers")?;
    env.set_state(&state)?;
    let text = fs::read_to_string(&args.actions)
        .with_context(|| format!("cannot read actions file {}", args.actions.display()))?;
    let actions = parse_actions(&text, spec.action_dim())?;
    // Validate every action through the same checks the vectorised env applies.
    for (i, a) in actions.iter().enumerate() {
        if let Some(v) = a.iter().find(|v| !v.is_finite()) {
            bail!("action {i} is not a finite number ({v})");
        }
        if let strata_env::Space::Discrete { n } = spec.action_space {
            if a[0].fract() != 0.0 || a[0] < 0.0 || a[0] >= n as f32 {
                bail!("action {i} = {} is not an integer in 0..{n}", a[0]);
            }
        }
    }
    let mut obs = vec![0.0_f32; spec.obs_dim()];
    for (t, a) in actions.iter().enumerate() {
        let tr = env.step(a, &mut obs);
        if let Some(v) = obs
            .iter()
            .map(|v| f64::from(*v))
            .chain([tr.reward])
            .find(|v| !v.is_finite())
        {
            bail!("step {}: the env produced a non-finite value ({v}); the state is outside the env's valid range", t + 1);
        }
        let truncated = t as u32 + 1 >= spec.max_episode_steps;
        let line = serde_json::json!({
            "step": t + 1,
            "obs": obs,
            "reward": tr.reward,
            "terminated": tr.terminated,
            "truncated": truncated,
        });
        println!("{line}");
        if tr.terminated || truncated {
            if t + 1 < actions.len() {
                eprintln!(
                    "episode ended after {} steps; {} actions left unused",
                    t + 1,
                    actions.len() - t - 1
                );
            }
            break;
        }
    }
    Ok(())
}
