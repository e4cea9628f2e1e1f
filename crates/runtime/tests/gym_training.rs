//! Training on Gymnasium envs in worker processes: `gym:CartPole-v1` learns as the built-in
//! `cartpole` does, a GRU learns POPGym's RepeatPrevious where an MLP cannot, each fault
//! inside Python (raise, NaN, segfault, hang) costs one invalid
//! fragment and a respawned process while training goes on, results do not depend on how
//! envs are spread over processes, a resumed run starts fresh episodes, and no process is
//! left behind. Needs Python with gymnasium (`STRATA_PYTHON`); skipped without it unless
//! `STRATA_REQUIRE_GYM` is set.

use std::sync::Mutex;

use strata_env::{FaultKind, FaultPlan};
use strata_ledger::{LedgerData, Storage};
use strata_nn::ConvPrecision;
use strata_runtime::{preset, run, RunConfig, RunDir, Trainer};

/// Tests here count this process's Python children, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[path = "../../cli/tests/support/optional.rs"]
mod optional;

/// Whether the interpreter gym envs run can import `modules` (skipped when not, unless
/// `STRATA_REQUIRE_GYM` is set).
fn python_has(modules: &str) -> bool {
    optional::gym_python_with(modules).is_some()
}

fn gymnasium() -> bool {
    python_has("gymnasium")
}

/// This file's turn to run (see [`SERIAL`]), if the interpreter has gymnasium.
fn serial_with_gymnasium() -> Option<std::sync::MutexGuard<'static, ()>> {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    gymnasium().then_some(serial)
}

/// Processes whose parent is this one (zombies included: an unreaped child is left
/// behind too), with their names.
fn children() -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if rest.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(me) {
            found.push((pid, stat[open + 1..close].to_string()));
        }
    }
    found
}

fn train_through(config: RunConfig) -> Trainer {
    let mut t = Trainer::new(config).unwrap();
    while !t.finished() {
        t.iterate().unwrap();
    }
    t
}

fn quick(env: &str, seed: u64, budget: u64) -> RunConfig {
    let mut c = preset(env).unwrap();
    c.train.seed = seed;
    c.train.total_steps = budget;
    c.train.deterministic = true;
    c.train.stop_when_solved = true;
    c
}

#[test]
fn gym_cartpole_learns_as_the_builtin_cartpole_does() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    // Start states come from different generators (NumPy's and ours), the dynamics are the
    // same to 1e-9 (tests/gymnasium_fixtures.rs): both solve, in similar numbers of steps.
    let mut steps = (Vec::new(), Vec::new());
    for seed in 1..=3 {
        for (env, out) in [
            ("cartpole", &mut steps.0),
            ("gym:CartPole-v1", &mut steps.1),
        ] {
            let s = train_through(quick(env, seed, 150_000)).summary();
            assert!(s.solved, "{env} seed {seed}: {:?}", s.final_mean_return);
            assert!(s.final_mean_return.unwrap() >= 475.0);
            out.push(s.steps_to_solve.unwrap() as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (builtin, gym) = (median(&mut steps.0), median(&mut steps.1));
    assert!(
        gym / builtin < 2.0 && builtin / gym < 2.0,
        "median steps to solve: built-in {builtin}, gym {gym}"
    );
    assert!(children().is_empty(), "{:?}", children());
}

#[test]
fn popgyms_repeat_previous_needs_the_memory_it_gets() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The pinned environment (python/requirements-gym.txt) has POPGym.
    if !python_has("gymnasium, popgym") {
        return;
    }
    // Say the card seen 4 steps ago: without memory, a quarter right (return -0.5); a GRU
    // on the generic preset (sequences of 32 steps) is past 0.8 at 100k steps on
    // seeds 1-3 (docs/environments.md).
    let mut returns = Vec::new();
    for core in [strata_nn::Core::Gru, strata_nn::Core::None] {
        let mut c = preset("gym:popgym:popgym-RepeatPreviousEasy-v0").unwrap();
        c.network.core = core;
        c.ppo.sequence_length = 32;
        c.train.seed = 1;
        c.train.total_steps = 100_000;
        c.train.deterministic = true;
        returns.push(train_through(c).summary().final_mean_return.unwrap());
    }
    assert!(returns[0] > 0.5, "gru {:?}", returns);
    assert!(returns[1] < -0.3, "no memory, chance {:?}", returns);
    assert!(children().is_empty(), "{:?}", children());
}

/// A 2-worker CartPole run whose worker 1 meets `kind` inside Python at its 30th step.
fn with_fault(kind: FaultKind) -> RunConfig {
    let mut c = preset("gym:CartPole-v1").unwrap();
    c.runtime.workers = 2;
    c.env.fault = Some(FaultPlan {
        kind,
        at_step: 30,
        hang_seconds: 120.0,
    });
    c.env.fault_worker = 1;
    c.train.total_steps = 12 * c.steps_per_update();
    c.runtime.restart_after_secs = if kind == FaultKind::Hang { 2.0 } else { 60.0 };
    c
}

fn contained(kind: FaultKind, reasons: &[&str]) {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    let mut t = train_through(with_fault(kind));
    let invalid = &t.progress().invalid_fragments;
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert_eq!((invalid[0].worker, invalid[0].incarnation), (1, 0));
    assert!(
        reasons.iter().any(|r| invalid[0].reason.contains(r)),
        "{:?}",
        invalid[0].reason
    );
    assert_eq!(t.progress().global_step, t.config().train.total_steps);
    // The replacement worker runs fresh processes; the failed ones are gone.
    let pythons = children().len();
    assert!(
        pythons >= 2,
        "both workers' processes run: {:?}",
        children()
    );
    t.shutdown();
    drop(t);
    assert!(children().is_empty(), "left behind: {:?}", children());
}

#[test]
fn an_env_that_raises_costs_one_fragment() {
    contained(FaultKind::Panic, &["injected fault"]);
}

#[test]
fn an_env_that_returns_nan_costs_one_fragment() {
    contained(FaultKind::Nan, &["non-finite observation"]);
}

#[test]
fn an_env_process_that_segfaults_costs_one_fragment() {
    contained(FaultKind::Crash, &["SIGSEGV"]);
}

#[test]
fn an_env_process_that_hangs_is_killed_and_costs_one_fragment() {
    // The env's own timeout and the learner's silence check race; either names it.
    contained(FaultKind::Hang, &["did not answer within", "silent for"]);
}

#[test]
fn the_process_split_does_not_change_a_deterministic_run() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    let run = |per: usize| {
        let mut c = quick("gym:CartPole-v1", 4, 6 * 256);
        c.train.stop_when_solved = false;
        c.runtime.envs_per_process = per;
        let t = train_through(c);
        (
            t.model().flat_params().to_vec(),
            t.summary().final_mean_return,
        )
    };
    let one_process = run(8);
    assert_eq!(run(1), one_process, "one env per process");
    assert_eq!(run(3), one_process, "uneven processes");
}

#[test]
fn a_resumed_gym_run_starts_fresh_episodes_and_checks_its_layout() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut c = quick("gym:CartPole-v1", 2, 4 * 256);
    c.train.stop_when_solved = false;
    let t = train_through(c);
    let layout = t
        .config()
        .env
        .gym
        .layout
        .clone()
        .expect("recorded when the run started");
    assert_eq!(layout.obs_dim, 4);
    strata_runtime::save_checkpoint(&t.state().unwrap(), dir.path()).unwrap();
    let hash = t.config_hash().to_string();
    drop(t);
    let mut wanted = strata_runtime::read_checkpoint(dir.path())
        .unwrap()
        .into_state()
        .config;
    wanted.train.total_steps = 8 * 256;
    let mut resumed = Trainer::resume(dir.path(), Some(wanted)).unwrap();
    // A new budget is a new identity: the run goes on under a new hash, from this one.
    assert_ne!(resumed.config_hash(), hash);
    assert_eq!(resumed.continued_from(), Some(hash.as_str()));
    while !resumed.finished() {
        resumed.iterate().unwrap();
    }
    assert_eq!(resumed.progress().global_step, 8 * 256);
    drop(resumed);
    // A checkpoint whose env's spaces changed since is refused, naming why.
    let mut state = strata_runtime::read_checkpoint(dir.path())
        .unwrap()
        .into_state();
    let recorded = state.config.env.gym.layout.as_mut().unwrap();
    recorded.observation = "Box(5,)".into();
    recorded.obs_dim = 5;
    let error = Trainer::from_state(state)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        error.contains("no longer has the recorded layout"),
        "{error}"
    );
    assert!(children().is_empty(), "{:?}", children());
}

#[test]
fn the_mujoco_fetch_and_minatar_presets_train_and_evaluate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The pinned environment (python/requirements-gym.txt) has them all.
    if !python_has("gymnasium, mujoco, gymnasium_robotics, minatar") {
        return;
    }
    for env in strata_runtime::GYM_PRESETS {
        let mut c = preset(&format!("gym:{env}")).unwrap();
        // Two updates and a short greedy evaluation: the presets' shapes, networks and
        // wrappers work end to end; learning is measured by the benchmarks.
        c.train.total_steps = 2 * c.steps_per_update();
        c.report.eval_episodes = 2;
        let mut t = train_through(c);
        let layout = t.config().env.gym.layout.clone().unwrap();
        let eval = t.evaluate_current().unwrap();
        assert_eq!(eval.episodes, 2);
        assert!(eval.mean_return.is_finite(), "{env}: {eval:?}");
        if env.contains("Fetch") {
            assert!(
                layout.observation.starts_with("Dict(achieved_goal=Box(3,)"),
                "{layout:?}"
            );
            assert!(eval.success_rate.is_some(), "Fetch reports is_success");
        }
        if env.starts_with("MinAtar/") {
            // Boolean pictures, channels-last, through the MinAtar agent's encoder.
            let image = &layout.images[0];
            assert_eq!((image.height, image.width), (10, 10), "{env}");
            assert_eq!(image.scale, strata_env::gym::ImageScale::Unit, "{env}");
            assert_eq!(
                strata_runtime::describe_encoders(t.config()).unwrap(),
                [format!("minatar_cnn on 10x10x{}", image.channels)]
            );
        }
    }
    assert!(children().is_empty(), "{:?}", children());
}

#[test]
fn gym_samples_carry_the_six_provenance_fields_with_the_envs_own_clock() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut c = quick("gym:CartPole-v1", 3, 6 * 256);
    c.train.stop_when_solved = false;
    c.report.eval_episodes = 0;
    let mut t = Trainer::new(c).unwrap();
    let mut run_dir = RunDir::create(dir.path(), &t).unwrap();
    run::train(&mut t, &mut run_dir, &mut |_| {}).unwrap();
    let storage = Storage::open(dir.path().join("ledger").to_str().unwrap()).unwrap();
    let data = LedgerData::read(&storage).unwrap();
    assert_eq!(data.sample_count() as u64, t.progress().global_step);
    let mut by_episode: std::collections::BTreeMap<u64, Vec<(u32, u64)>> = Default::default();
    let mut ended = 0;
    for b in &data.samples {
        assert_eq!(b.config_hash, t.config_hash());
        for i in 0..b.len() {
            let r = b.row(i);
            assert!(r.completed_at_ns >= r.issued_at_ns && r.issued_at_ns > 0);
            assert_eq!((r.obs_count, r.obs_min.len()), (1, 4));
            assert!(r.sampler_version >= r.policy_version);
            ended += usize::from(r.episode_return.is_some());
            by_episode
                .entry(r.episode_id)
                .or_default()
                .push((r.step, r.env_clock));
        }
    }
    assert!(ended > 0, "episodes ended and say their return");
    // The clock is the env process's own count: one tick per step within an episode, and
    // it does not restart with the episode.
    let mut later_episodes = 0;
    for steps in by_episode.values_mut() {
        steps.sort_unstable();
        assert!(
            steps.windows(2).all(|w| w[1] == (w[0].0 + 1, w[0].1 + 1)),
            "{steps:?}"
        );
        later_episodes += usize::from(steps[0].1 > 1);
    }
    assert!(later_episodes > 0, "clocks run on across episodes");
}

/// A factory env (written into `dir`): CartPole that raises a simulator error at random,
/// with probability `p` a step, its draws seeded by the seed each reset is given.
fn flaky_cartpole(dir: &std::path::Path, p: f64) -> RunConfig {
    std::fs::write(
        dir.join("flaky_envs.py"),
        r#"
import random
import gymnasium as gym


class Flaky(gym.Wrapper):
    def __init__(self, env, p):
        super().__init__(env)
        self.p = p
        self.rng = random.Random(0)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = random.Random(seed)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self.rng.random() < self.p:
            raise RuntimeError("sporadic simulator error")
        return self.env.step(action)


def make_env(p=0.0):
    return Flaky(gym.make("CartPole-v1"), p)
"#,
    )
    .unwrap();
    let mut c = preset("gym:flaky_envs:make_env").unwrap();
    c.runtime.python_path = vec![dir.to_path_buf()];
    c.env.gym.kwargs.insert("p".into(), toml::Value::Float(p));
    c
}

#[test]
fn an_env_that_raises_now_and_then_trains_to_the_end_with_its_faults_counted() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // About one fault per 10k steps over a 100k-step run: each costs one fragment and one
    // restarted process; the default budget lets the run go on.
    let mut c = flaky_cartpole(tmp.path(), 1e-4);
    // Fragments of 8 x 256 steps: a fault every 10k steps spares most of them.
    c.env.num_envs = 8;
    c.ppo.n_steps = 256;
    c.runtime.envs_per_process = 2;
    c.train.total_steps = 100_000;
    let run_dir = tmp.path().join("run");
    let mut t = Trainer::new(c).unwrap();
    let mut rd = RunDir::create(&run_dir, &t).unwrap();
    let summary = run::train(&mut t, &mut rd, &mut |_| {}).unwrap();
    assert_eq!(summary.stop, strata_runtime::StopReason::Budget);
    assert!(summary.total_steps >= 100_000);
    let faults = summary.worker_faults;
    assert!(
        (2..=40).contains(&faults),
        "{faults} faults in 100k steps at p = 1e-4"
    );
    let invalid = &t.progress().invalid_fragments;
    assert_eq!(invalid.len() as u64, faults);
    assert!(
        invalid
            .iter()
            .all(|f| f.reason.contains("sporadic simulator error") && f.incarnation == 0),
        "each fault restarted one env process, not its worker: {invalid:?}"
    );
    // The metrics file counts them as they happen.
    let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(metrics.lines().last().unwrap()).unwrap();
    assert_eq!(last["worker_faults"].as_u64(), Some(faults));
    drop(t);
    assert!(children().is_empty(), "left behind: {:?}", children());
}

#[test]
fn an_env_that_raises_at_every_step_stops_the_run_quickly_with_its_traceback() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let c = flaky_cartpole(tmp.path(), 1.0);
    let mut t = Trainer::new(c).unwrap();
    let err = loop {
        match t.iterate() {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    let text = err.to_string();
    assert!(text.contains("a crash loop"), "{text}");
    assert!(
        text.contains("Traceback") && text.contains("sporadic simulator error"),
        "{text}"
    );
    // Bounded by count, not by a clock: four restarted processes, and the fifth failure in
    // a row (runtime.max_consecutive_failures) stops the run.
    assert_eq!(t.progress().worker_faults, 4);
    drop(t);
    assert!(children().is_empty(), "left behind: {:?}", children());
}

/// The pixel test env (`crates/env/tests/python`), its picture laid out as `kwargs` say.
fn pixel_task(kwargs: &[(&str, toml::Value)]) -> RunConfig {
    let mut c = preset("gym:strata_test_envs:make_pixel_env").unwrap();
    c.runtime.python_path =
        vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../env/tests/python")];
    for (key, value) in kwargs {
        c.env.gym.kwargs.insert((*key).into(), value.clone());
    }
    c
}

#[test]
fn an_image_env_trains_with_the_cnn_its_picture_calls_for() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    // Channels-first, two channels: the CNN must see the square wherever the env puts
    // its axes. Guessing earns 4 an episode, seeing the square 8. It learns as well with
    // the convolutions' products in bfloat16.
    for precision in [ConvPrecision::F32, ConvPrecision::Bf16] {
        let mut c = pixel_task(&[
            ("order", toml::Value::String("chw".into())),
            ("channels", toml::Value::Integer(2)),
        ]);
        c.train.seed = 1;
        c.train.total_steps = 40_960;
        c.train.deterministic = true;
        c.network.policy_hidden = vec![];
        c.network.value_hidden = vec![];
        c.network.conv_precision = precision;
        let mut resolved = c.clone();
        strata_runtime::resolve_env(&mut resolved).unwrap();
        let described = match precision {
            ConvPrecision::F32 => "minatar_cnn on 12x12x2",
            ConvPrecision::Bf16 => "minatar_cnn (bf16) on 12x12x2",
        };
        assert_eq!(
            strata_runtime::describe_encoders(&resolved).unwrap(),
            [described]
        );
        let t = train_through(c);
        // The 288 pixel values of a row take a byte each, in the rollout (2048 rows) and
        // in every fragment slot (observations and final observations).
        let (rollout, fragments) = t.obs_memory_bytes();
        assert_eq!(rollout, 2048 * 288);
        assert_eq!(fragments % (2 * 2048 * 288), 0, "{fragments}");
        let s = t.summary();
        drop(t);
        let last = s.final_mean_return.unwrap();
        assert!(
            last >= 7.0,
            "{precision:?}: mean return {last} (guessing earns 4)"
        );
        assert!(children().is_empty(), "{:?}", children());
    }
}

#[test]
fn normalising_image_observations_is_refused_by_name() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    let mut c = pixel_task(&[]);
    c.env.normalize_obs = true;
    let err = Trainer::new(c.clone()).err().unwrap().to_string();
    assert!(err.contains("env.normalize_obs"), "{err}");
    // Fed to an MLP as raw values, they may be normalised.
    c.network.encoder = strata_nn::Encoder::Mlp;
    let mut resolved = c.clone();
    strata_runtime::resolve_env(&mut resolved).unwrap();
    assert!(strata_runtime::describe_encoders(&resolved)
        .unwrap()
        .is_empty());
}

#[test]
fn image_samples_are_summarised_per_channel_in_the_ledger() {
    let Some(_serial) = serial_with_gymnasium() else {
        return;
    };
    // A Dict of a 12x12 grey picture and a 2-value state: 1 + 2 summary values, not
    // 144 + 2.
    let dir = tempfile::tempdir().unwrap();
    let mut c = pixel_task(&[("dict_obs", toml::Value::Boolean(true))]);
    c.train.total_steps = 2 * 2048;
    c.report.eval_episodes = 0;
    let mut t = Trainer::new(c).unwrap();
    let mut run_dir = RunDir::create(dir.path(), &t).unwrap();
    run::train(&mut t, &mut run_dir, &mut |_| {}).unwrap();
    let storage = Storage::open(dir.path().join("ledger").to_str().unwrap()).unwrap();
    let data = LedgerData::read(&storage).unwrap();
    assert_eq!(data.sample_count(), 2 * 2048);
    let mut hashes = std::collections::HashSet::new();
    for b in &data.samples {
        for i in 0..b.len() {
            let r = b.row(i);
            assert_eq!(r.obs_min.len(), 3);
            // The picture: dark with a bright 3x3 square (9 of 144 pixels).
            assert_eq!((r.obs_min[0], r.obs_max[0]), (0.0, 255.0));
            assert!((r.obs_mean[0] - 255.0 * 9.0 / 144.0).abs() < 1e-3);
            assert_eq!(&r.obs_mean[1..], &[0.5, -0.5]);
            hashes.insert(r.obs_hash);
        }
    }
    // 80 places for the square (10 rows, 4 columns a side): the hash tells them apart.
    assert!(
        (60..=80).contains(&hashes.len()),
        "{} distinct hashes",
        hashes.len()
    );
}
