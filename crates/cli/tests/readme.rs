//! The command lines users read stay true. The Commands chapter's block
//! (`docs/commands.md`): each of its lines either runs here as written, in order, from a
//! directory laid out as the repository's root (its `examples/`), at a small size (a step
//! budget added, a count lowered), or names the test that runs it (a server, a benchmark,
//! a cluster). A line added to or changed in that block without a plan here fails this
//! test. The README's `strata` lines are each one of that block's, so they run too.

#[path = "support/optional.rs"]
mod optional;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How one line of the Commands chapter is checked.
enum Check {
    /// Run it, with `add` appended and each `(from, to)` argument of `replace` swapped, and
    /// expect exit 0 with `expect` in its output. `gym`: the Python modules it needs.
    Run {
        add: &'static [&'static str],
        replace: &'static [(&'static str, &'static str)],
        expect: &'static str,
        gym: Option<&'static str>,
    },
    /// Covered by test `name` in `crates/cli/tests/<file>` (a long-running server, a
    /// terminal, a NATS cluster), or, with an empty `name`, what it is.
    Elsewhere {
        file: &'static str,
        name: &'static str,
    },
}

const fn run(add: &'static [&'static str], expect: &'static str) -> Check {
    Check::Run {
        add,
        replace: &[],
        expect,
        gym: None,
    }
}

const fn elsewhere(file: &'static str, name: &'static str) -> Check {
    Check::Elsewhere { file, name }
}

const SMALL: &[&str] = &["--max-steps", "4096"];

/// Every command of the Commands chapter's block, as written there (continuations joined, comments
/// dropped), with how it is checked.
const PLAN: &[(&str, Check)] = &[
    ("strata train --env pendulum", run(SMALL, "finished")),
    (
        "strata train --config examples/run.toml --set ppo.n_epochs=4",
        run(SMALL, "finished"),
    ),
    (
        "strata train --env cartpole --seed 3 --max-steps 50000 --stop-when-solved \
         --deterministic --checkpoint-every 10240 --summary-json summary.json \
         --run-dir runs/cp3",
        run(&[], "solved"),
    ),
    (
        "strata train --resume runs/cp3 --max-steps 80000",
        run(&[], "finished"),
    ),
    (
        "strata train --env cartpole --workers 2 --mode async",
        run(SMALL, "finished"),
    ),
    (
        "strata train --env cartpole --pin-cpus 0,1 --log-level info",
        run(SMALL, "finished"),
    ),
    (
        "strata config show --env acrobot",
        run(&[], "name = \"acrobot\""),
    ),
    (
        "strata eval --checkpoint runs/cp3 --episodes 20",
        run(&[], "evaluating the final checkpoint"),
    ),
    (
        "strata eval --checkpoint runs/cp3 --best",
        run(&[], "evaluating the best evaluated"),
    ),
    (
        "strata eval --checkpoint runs/cp3 --version 40",
        run(&[], "policy v40"),
    ),
    (
        "strata eval --checkpoint runs/cp3 --best --record videos",
        run(&[], "video: videos/v"),
    ),
    ("strata report runs/cp3", run(&[], "report.html")),
    (
        "strata report runs/cartpole-seed*",
        elsewhere(
            "report.rs",
            "a_report_of_several_runs_groups_seeds_and_labels_configs_by_their_difference",
        ),
    ),
    (
        "strata train --env cartpole --monitor",
        elsewhere(
            "live.rs",
            "the_monitor_renders_in_a_terminal_and_q_stops_the_training",
        ),
    ),
    (
        "strata train --env cartpole --metrics-addr 127.0.0.1:9100",
        elsewhere(
            "live.rs",
            "a_running_training_serves_prometheus_metrics_and_its_status",
        ),
    ),
    (
        "strata top --addr 127.0.0.1:9100",
        elsewhere("live.rs", "strata_top_shows_a_training_running_elsewhere"),
    ),
    (
        "tensorboard --logdir runs",
        elsewhere("report.rs", "tensorboard_reads_the_scalars_back"),
    ),
    ("strata env list", run(&[], "Discrete(2)")),
    (
        "strata env rollout --env cartpole --state [0,0,0.05,0] --actions examples/actions.txt",
        run(&[], "\"step\":20"),
    ),
    ("strata ledger summary runs/cp3", run(&[], "trained")),
    ("strata ledger metrics runs/cp3", run(&[], "valid")),
    (
        "strata ledger recompute runs/cp3 --rules examples/decay.toml",
        run(&[], "decay"),
    ),
    (
        "strata ledger manifest runs/cp3 --format csv --out manifest.csv",
        run(&[], ""),
    ),
    (
        "strata ledger invalidate runs/cp3 --trajectory 4096 --reason human_interrupt \
         --text cell door opened --author operator:ana",
        run(&[], "marked"),
    ),
    (
        "strata train --env cartpole --run-dir runs/cp3 --overwrite",
        run(SMALL, "replaced"),
    ),
    (
        "strata serve --env cartpole",
        elsewhere("gateway.rs", "fleet_runs_against_a_served_gateway"),
    ),
    (
        "strata serve --checkpoint runs/cp3/best",
        elsewhere(
            "gateway.rs",
            "serve_checkpoint_serves_a_trained_policy_at_once",
        ),
    ),
    (
        "strata fleet --agents 8 --steps 50000",
        Check::Run {
            add: &[],
            replace: &[("50000", "2000")],
            expect: "steps",
            gym: None,
        },
    ),
    (
        "strata fleet --server http://127.0.0.1:7878 --tokens runs/gateway/tokens.json",
        elsewhere("gateway.rs", "fleet_runs_against_a_served_gateway"),
    ),
    (
        "strata bench",
        elsewhere("", "a benchmark; its figures are in docs/benchmarks.md"),
    ),
    (
        "strata train --env gym:HalfCheetah-v5",
        Check::Run {
            add: &["--max-steps", "2048"],
            replace: &[],
            expect: "finished",
            gym: Some("gymnasium, mujoco"),
        },
    ),
    (
        "strata train --env gym:my_pkg.envs:make_env --set runtime.python_path=examples \
         --set env.gym.kwargs.difficulty=3",
        Check::Run {
            add: &["--max-steps", "2048"],
            replace: &[],
            expect: "finished",
            gym: Some("gymnasium"),
        },
    ),
    (
        "strata bench gym",
        elsewhere("", "a benchmark; its figures are in docs/benchmarks.md"),
    ),
    (
        "strata learner --nats nats://10.0.0.1:4222 --run cheetah --env gym:HalfCheetah-v5 \
         --workers 4",
        elsewhere(
            "cluster.rs",
            "a_distributed_run_is_the_one_process_run_bit_for_bit",
        ),
    ),
    (
        "strata worker --nats nats://10.0.0.1:4222 --run cheetah --threads 2",
        elsewhere(
            "cluster.rs",
            "a_distributed_run_is_the_one_process_run_bit_for_bit",
        ),
    ),
    (
        "strata serve --nats nats://10.0.0.1:4222 --run cheetah --release canary",
        elsewhere(
            "cluster.rs",
            "of_two_gateways_racing_to_promote_exactly_one_wins",
        ),
    ),
    (
        "strata bench cluster",
        elsewhere("", "a benchmark; its figures are in docs/benchmarks.md"),
    ),
    (
        "strata learner --nats nats://10.0.0.1:4222 --run fleet --from-gateways --env cartpole",
        elsewhere(
            "deployed.rs",
            "three_gateways_feed_one_learner_through_kills_and_invalidations",
        ),
    ),
    (
        "strata serve --nats nats://10.0.0.1:4222 --run fleet --gateway-id 1 --tls-cert gw.pem \
         --tls-key gw.key",
        elsewhere(
            "tls.rs",
            "the_gateway_serves_https_reloads_its_certificate_on_sighup_and_plain_http_on_loopback",
        ),
    ),
    (
        "strata ledger summary runs/gw1 runs/gw2 runs/fleet-learner",
        elsewhere(
            "deployed.rs",
            "three_gateways_feed_one_learner_through_kills_and_invalidations",
        ),
    ),
    (
        "strata bench deployed",
        elsewhere(
            "",
            "a benchmark; its figures are in docs/beyond-one-machine.md",
        ),
    ),
];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The commands of the Commands chapter's first `sh` block, as argument lists.
fn readme_commands() -> Vec<Vec<String>> {
    let chapter = std::fs::read_to_string(repository().join("docs/commands.md")).unwrap();
    let section = chapter
        .split("# Commands\n")
        .nth(1)
        .expect("a Commands chapter");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a sh block in Commands");
    block_commands(block)
}

/// A block's commands as argument lists: lines ending in `\` joined to the next,
/// `# comments` dropped, quotes taken as the shell takes them.
fn block_commands(block: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        let line = line.trim_end();
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                commands.push(shell_words(&pending));
                pending.clear();
            }
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// The `strata` commands of every `sh` block in the README.
fn front_door_commands() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .flat_map(block_commands)
        .filter(|c| c[0] == "strata")
        .collect()
}

/// A command line's words as a POSIX shell splits them (quotes, no expansions), up to an
/// unquoted `#`.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    w.push(q);
                }
            }
            '#' if word.is_none() => break,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Runs `args` (with `strata` as the binary under test) in `dir`, killed after `limit`.
fn run_in(dir: &Path, args: &[String], limit: Duration) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(&args[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return (false, format!("still running after {limit:?}; killed"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[test]
fn every_readme_command_runs_as_written_or_names_its_test() {
    let commands = readme_commands();
    let planned: Vec<String> = PLAN
        .iter()
        .map(|(line, _)| shell_words(line).join(" "))
        .collect();
    let written: Vec<String> = commands.iter().map(|c| c.join(" ")).collect();
    assert_eq!(
        written, planned,
        "the Commands chapter's block and this test's plan differ: update the plan"
    );
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repository().join("examples"), &dir.path().join("examples"));
    for (words, (_, check)) in commands.iter().zip(PLAN) {
        let line = words.join(" ");
        match check {
            Check::Elsewhere { file, name } => {
                if !file.is_empty() {
                    let source =
                        std::fs::read_to_string(repository().join("crates/cli/tests").join(file))
                            .unwrap();
                    assert!(
                        source.contains(&format!("fn {name}()")),
                        "`{line}`: no test {name} in {file}"
                    );
                }
            }
            Check::Run {
                add,
                replace,
                expect,
                gym,
            } => {
                if let Some(modules) = gym {
                    if optional::gym_python_with(modules).is_none() {
                        continue;
                    }
                }
                let mut args: Vec<String> = words
                    .iter()
                    .map(|w| {
                        replace
                            .iter()
                            .find(|(from, _)| w == from)
                            .map_or_else(|| w.clone(), |(_, to)| to.to_string())
                    })
                    .collect();
                args.extend(add.iter().map(|a| a.to_string()));
                let (ok, output) = run_in(dir.path(), &args, Duration::from_secs(180));
                assert!(ok, "`{}` failed:\n{output}", args.join(" "));
                assert!(
                    output.contains(expect),
                    "`{}` does not say {expect:?}:\n{output}",
                    args.join(" ")
                );
            }
        }
    }
    // What the commands say they write is there.
    let root = dir.path();
    for made in [
        "runs/cp3/checkpoint",
        "runs/cp3/best",
        "summary.json",
        "manifest.csv",
    ] {
        assert!(root.join(made).exists(), "no {made}");
    }
    let replaced = std::fs::read_dir(root.join("runs"))
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().starts_with("cp3.replaced-"));
    assert!(replaced, "--overwrite moved the old run aside");
}

#[test]
fn the_readmes_commands_are_the_commands_chapters() {
    let chapter: Vec<String> = readme_commands().iter().map(|c| c.join(" ")).collect();
    let front = front_door_commands();
    assert!(
        front.len() >= 5,
        "the README shows its first commands: {front:?}"
    );
    for command in front {
        let line = command.join(" ");
        assert!(
            chapter.contains(&line),
            "the README's `{line}` is not a line of docs/commands.md's block, which the tests run"
        );
    }
}

#[test]
fn shell_words_split_as_a_shell_does() {
    assert_eq!(
        shell_words(r#"strata x --state '[0, 1]' --text "a b" # comment"#),
        ["strata", "x", "--state", "[0, 1]", "--text", "a b"]
    );
}
