//! Gymnasium envs in worker processes, against the real Gymnasium: layouts, stepping with
//! same-step autoreset, seeding independent of the process split, every fault contained,
//! and no process left behind. Needs Python with gymnasium (`STRATA_PYTHON`); skipped
//! without it unless `STRATA_REQUIRE_GYM` is set.

use std::path::{Path, PathBuf};
use std::time::Duration;

use strata_env::gym::{
    describe, ChannelOrder, GymError, GymLayout, GymOptions, GymTarget, GymVecEnv, ImageScale,
};
use strata_env::{EnvError, FaultKind, FaultPlan, Space, StepBatch, VecEnv};

#[path = "../../cli/tests/support/optional.rs"]
mod optional;

/// The interpreter, if it has gymnasium.
fn python() -> Option<PathBuf> {
    optional::gym_python().map(PathBuf::from)
}

fn target(python: &Path, id: &str) -> GymTarget {
    let mut t = GymTarget::new(id, python);
    t.python_path
        .push(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python"));
    t
}

const TIMEOUT: Duration = Duration::from_secs(60);

fn start(
    t: &GymTarget,
    n: usize,
    per: usize,
    fault: Option<FaultPlan>,
) -> Result<GymVecEnv, EnvError> {
    let layout = describe(t, TIMEOUT).unwrap();
    let options = GymOptions {
        envs_per_process: per,
        step_timeout: Duration::from_secs(2),
        fault,
        ..GymOptions::default()
    };
    GymVecEnv::start(&format!("gym:{}", t.id), t, &layout, n, &options)
}

fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state is `Z`.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn cartpole_is_described_as_gymnasium_registers_it() {
    let Some(py) = python() else { return };
    let layout = describe(&target(&py, "CartPole-v1"), TIMEOUT).unwrap();
    assert_eq!(
        layout,
        GymLayout {
            id: "CartPole-v1".into(),
            observation: "Box(4,)".into(),
            obs_dim: 4,
            action: Space::Discrete { n: 2 },
            max_episode_steps: Some(500),
            reward_threshold: Some(475.0),
            images: Vec::new(),
        }
    );
}

/// The pixel test env's layout and first flattened observation, with `kwargs`.
fn pixel_probe(py: &Path, kwargs: serde_json::Value) -> (GymLayout, Vec<f32>) {
    let mut t = target(py, "strata_test_envs:make_pixel_env");
    t.kwargs = kwargs.as_object().unwrap().clone();
    t.kwargs.insert("probe".into(), true.into());
    let layout = describe(&t, TIMEOUT).unwrap();
    let mut envs = start(&t, 1, 1, None).unwrap();
    let mut batch = StepBatch::new(envs.spec(), 1);
    envs.reset(0, &mut batch.obs).unwrap();
    (layout, batch.obs)
}

#[test]
fn images_are_found_in_every_layout_and_written_channels_last() {
    let Some(py) = python() else { return };
    // (kwargs, order found, channels, the text, each frame's own channels)
    let cases = [
        (
            serde_json::json!({}),
            ChannelOrder::Hwc,
            1,
            "Image(12, 12, 1)",
            1,
        ),
        (
            serde_json::json!({"order": "chw", "channels": 3}),
            ChannelOrder::Chw,
            3,
            "Image(3, 12, 12)",
            3,
        ),
        (
            serde_json::json!({"order": "hw"}),
            ChannelOrder::Hw,
            1,
            "Image(12, 12)",
            1,
        ),
        // Gymnasium's frame stack puts the stack first: 3 grey frames are 3 channels...
        (
            serde_json::json!({"order": "hw", "stack": 3}),
            ChannelOrder::Chw,
            3,
            "Image(3, 12, 12)",
            1,
        ),
        // ... and 2 frames of 2 channels each, 4.
        (
            serde_json::json!({"order": "hwc", "channels": 2, "stack": 2}),
            ChannelOrder::StackHwc,
            4,
            "Image(2, 12, 12, 2)",
            2,
        ),
        (
            serde_json::json!({"order": "chw", "channels": 2, "stack": 2}),
            ChannelOrder::StackChw,
            4,
            "Image(2, 2, 12, 12)",
            2,
        ),
    ];
    for (kwargs, order, channels, text, frame_channels) in cases {
        let (layout, obs) = pixel_probe(&py, kwargs.clone());
        assert_eq!(layout.observation, text, "{kwargs}");
        let image = &layout.images[0];
        assert_eq!(layout.images.len(), 1, "{kwargs}");
        assert_eq!(
            (image.offset, image.height, image.width, image.channels),
            (0, 12, 12, channels),
            "{kwargs}"
        );
        assert_eq!((image.order, image.scale), (order, ImageScale::Byte));
        let dims: Vec<String> = image.shape.iter().map(usize::to_string).collect();
        assert_eq!(format!("Image({})", dims.join(", ")), text);
        assert_eq!(layout.obs_dim, image.len());
        // The probe's value at (h, w, c) is h * 16 + w * 4 + c of its frame's own
        // channel: channels-last puts it at (h * 12 + w) * channels + c.
        for (h, w, c) in [
            (0, 0, 0),
            (1, 2, 0),
            (11, 5, channels - 1),
            (7, 11, channels / 2),
        ] {
            let want = ((h * 16 + w * 4 + c % frame_channels) % 256) as f32;
            assert_eq!(
                obs[(h * 12 + w) * channels + c],
                want,
                "{kwargs} at {h},{w},{c}"
            );
        }
    }
    // Beside a vector in a Dict: the picture first (key order), then the state.
    let (layout, obs) = pixel_probe(&py, serde_json::json!({"dict_obs": true}));
    assert_eq!(
        layout.observation,
        "Dict(picture=Image(12, 12, 1), state=Box(2,))"
    );
    assert_eq!(layout.obs_dim, 146);
    assert_eq!(layout.images.len(), 1);
    assert_eq!(layout.images[0].offset, 0);
    assert_eq!(&obs[144..], &[0.5, -0.5]);
}

#[test]
fn dict_observations_are_flattened_in_key_order_with_one_hot_discretes() {
    let Some(py) = python() else { return };
    let t = target(&py, "strata_test_envs:make_dict_env");
    let layout = describe(&t, TIMEOUT).unwrap();
    assert_eq!(
        layout.observation,
        "Dict(flags=MultiBinary(2,), mode=Discrete(3), pos=Box(2,))"
    );
    assert_eq!(layout.obs_dim, 7);
    assert_eq!(layout.max_episode_steps, None);
    let mut envs = start(&t, 2, 1, None).unwrap();
    let mut batch = StepBatch::new(envs.spec(), 2);
    envs.reset(3, &mut batch.obs).unwrap();
    // flags [0, 1], mode 0 one-hot, then the position.
    assert_eq!(&batch.obs[..5], &[0.0, 1.0, 1.0, 0.0, 0.0]);
    envs.step(&[0.0, 0.0, 0.0, 0.0], &mut batch).unwrap();
    assert_eq!(&batch.obs[..5], &[1.0, 1.0, 0.0, 1.0, 0.0]);
    assert_eq!(batch.rewards, vec![1.0, 1.0]);
    assert_eq!(batch.clock, vec![1, 1]);
}

#[test]
fn episodes_autoreset_in_the_same_step_and_keep_their_final_observation() {
    let Some(py) = python() else { return };
    let t = target(&py, "strata_test_envs:make_dict_env");
    let mut envs = start(&t, 1, 1, None).unwrap();
    let spec = envs.spec().clone();
    let mut batch = StepBatch::new(&spec, 1).with_exec(&spec);
    envs.reset(0, &mut batch.obs).unwrap();
    // Pushes of 3 leave the unit square within two steps: terminated, successful, and
    // reset at once.
    let mut steps = 0;
    while batch.episodes.is_empty() {
        envs.step(&[3.0, 0.0], &mut batch).unwrap();
        steps += 1;
        assert!(steps <= 2);
    }
    assert!(batch.terminated[0] && !batch.truncated[0]);
    assert_eq!(batch.episodes[0].success, Some(true));
    assert_eq!(batch.episodes[0].length, steps);
    // The action was clipped to 1 at the env boundary: x moved by at most 1 per step
    // from within 0.5 of 0 (unclipped, one push would take it past 2.5).
    let x_final = batch.final_obs[5];
    assert!((1.0..2.5).contains(&x_final), "{x_final}");
    assert!(batch.obs[5].abs() <= 0.5, "a fresh start state");
    let exec = batch.exec.as_ref().unwrap();
    assert_eq!(exec.ticks, vec![1]);
    assert_eq!(
        exec.max, batch.final_obs,
        "the summary is of what the action led to"
    );
    // Without leaving the square, the limit of 6 truncates.
    for step in 1..=6 {
        envs.step(&[0.0, 0.0], &mut batch).unwrap();
        assert_eq!(batch.truncated[0], step == 6);
    }
    assert_eq!(batch.episodes[0].success, Some(false));
    assert_eq!(batch.clock, vec![u64::from(steps) + 6]);
}

#[test]
fn seeds_follow_the_env_index_not_the_process_split() {
    let Some(py) = python() else { return };
    let t = target(&py, "CartPole-v1");
    let run = |per: usize| {
        let mut envs = start(&t, 5, per, None).unwrap();
        assert_eq!(envs.pids().len(), 5usize.div_ceil(per));
        let mut batch = StepBatch::new(envs.spec(), 5);
        envs.reset(11, &mut batch.obs).unwrap();
        let mut seen = batch.obs.clone();
        let mut ends = Vec::new();
        for k in 0..120 {
            let actions: Vec<f32> = (0..5).map(|i| ((i + k) % 2) as f32).collect();
            envs.step(&actions, &mut batch).unwrap();
            seen.extend_from_slice(&batch.obs);
            ends.extend(batch.episodes.iter().map(|e| (e.env, e.length)));
        }
        (seen, ends)
    };
    let (one, ends) = run(5);
    assert!(!ends.is_empty(), "episodes ended within 120 steps");
    assert_eq!(run(2), (one.clone(), ends));
    assert_eq!(run(1).0, one);
}

#[test]
fn spinning_and_sleeping_waits_see_the_same_steps_and_errors() {
    let Some(py) = python() else { return };
    let t = target(&py, "CartPole-v1");
    let layout = describe(&t, TIMEOUT).unwrap();
    let run = |spin: Duration| {
        let options = GymOptions {
            envs_per_process: 2,
            spin: Some(spin),
            fault: Some(FaultPlan {
                kind: FaultKind::Panic,
                at_step: 300,
                hang_seconds: 0.0,
            }),
            ..GymOptions::default()
        };
        let mut envs = GymVecEnv::start("gym:CartPole-v1", &t, &layout, 3, &options).unwrap();
        let mut batch = StepBatch::new(envs.spec(), 3);
        envs.reset(5, &mut batch.obs).unwrap();
        let mut seen = Vec::new();
        // More steps than the stale wake-ups drained at a time, so draining is exercised.
        for k in 0..299 {
            let actions: Vec<f32> = (0..3).map(|i| ((i * 7 + k) % 2) as f32).collect();
            envs.step(&actions, &mut batch).unwrap();
            seen.extend_from_slice(&batch.obs);
        }
        let error = envs.step(&[0.0; 3], &mut batch).unwrap_err().to_string();
        (seen, error)
    };
    let (sleeping, error) = run(Duration::ZERO);
    assert!(error.contains("injected fault"), "{error}");
    // A budget long enough that the worker is still spinning when the next step comes.
    let (spinning, spun_error) = run(Duration::from_millis(5));
    assert_eq!(spinning, sleeping);
    assert!(spun_error.contains("injected fault"), "{spun_error}");
}

#[test]
fn dropping_the_vector_stops_and_reaps_every_process() {
    let Some(py) = python() else { return };
    let envs = start(&target(&py, "CartPole-v1"), 4, 2, None).unwrap();
    let pids = envs.pids();
    assert!(pids.iter().all(|&p| alive(p)));
    drop(envs);
    assert!(pids.iter().all(|&p| !alive(p)), "{pids:?}");
}

/// Runs `kind` at the third step and returns the error and the pids.
fn fault(kind: FaultKind) -> (EnvError, Vec<u32>) {
    let py = python().expect("checked by the caller");
    let plan = FaultPlan {
        kind,
        at_step: 3,
        hang_seconds: 60.0,
    };
    let mut envs = start(&target(&py, "CartPole-v1"), 2, 1, Some(plan)).unwrap();
    let pids = envs.pids();
    let mut batch = StepBatch::new(envs.spec(), 2);
    for _ in 0..2 {
        envs.step(&[0.0, 1.0], &mut batch).unwrap();
    }
    let error = envs.step(&[0.0, 1.0], &mut batch).unwrap_err();
    // A failed vector keeps answering the same error (compared as text: NaN != NaN).
    let again = envs.step(&[0.0, 1.0], &mut batch).unwrap_err();
    assert_eq!(again.to_string(), error.to_string());
    drop(envs);
    assert!(pids.iter().all(|&p| !alive(p)), "{pids:?}");
    (error, pids)
}

#[test]
fn an_env_that_raises_fails_with_its_traceback() {
    if python().is_none() {
        return;
    }
    let (error, _) = fault(FaultKind::Panic);
    let EnvError::Gym {
        process: 0,
        error: GymError::Raised { traceback },
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert!(traceback.contains("injected fault"), "{traceback}");
    assert!(
        error
            .to_string()
            .contains("env process 0 of `gym:CartPole-v1`"),
        "{error}"
    );
}

#[test]
fn a_nan_observation_is_refused() {
    if python().is_none() {
        return;
    }
    let (error, _) = fault(FaultKind::Nan);
    assert!(
        matches!(
            error,
            EnvError::NonFinite {
                index: 0,
                what: "observation",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_crashed_process_is_seen_at_once() {
    if python().is_none() {
        return;
    }
    let started = std::time::Instant::now();
    let (error, pids) = fault(FaultKind::Crash);
    let EnvError::Gym {
        error: GymError::Exited { pid, status },
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(*pid, pids[0]);
    assert!(status.contains("signal 11 (SIGSEGV)"), "{status}");
    assert!(started.elapsed() < Duration::from_secs(30), "not a timeout");
}

#[test]
fn a_hung_process_is_killed_after_the_step_timeout() {
    if python().is_none() {
        return;
    }
    let started = std::time::Instant::now();
    let (error, _) = fault(FaultKind::Hang);
    assert!(
        matches!(
            error,
            EnvError::Gym {
                error: GymError::Hung { .. },
                ..
            }
        ),
        "{error:?}"
    );
    // Two seconds of step timeout, not the sixty of the hang.
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn bad_targets_get_clear_errors() {
    let Some(py) = python() else { return };
    let error = describe(&target(&py, "NoSuchEnv-v0"), TIMEOUT).unwrap_err();
    assert!(
        matches!(&error, GymError::Raised { traceback } if traceback.contains("NoSuchEnv")),
        "{error}"
    );
    let error = describe(
        &GymTarget::new("CartPole-v1", "/nonexistent/python"),
        TIMEOUT,
    )
    .unwrap_err();
    assert!(matches!(error, GymError::Spawn { .. }), "{error}");
    // An env whose spaces no longer match the recorded layout is refused when it starts.
    let t = target(&py, "CartPole-v1");
    let mut layout = describe(&t, TIMEOUT).unwrap();
    layout.obs_dim = 5;
    layout.observation = "Box(5,)".into();
    let error = GymVecEnv::start("gym:CartPole-v1", &t, &layout, 1, &GymOptions::default())
        .err()
        .expect("refused");
    assert!(error.to_string().contains("spaces changed"), "{error}");
}

/// A Python with neither numpy nor gymnasium: a fresh virtual environment without pip.
fn bare_python(dir: &Path) -> PathBuf {
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(dir)
        .status()
        .expect("python3 runs");
    assert!(made.success(), "python3 -m venv failed");
    dir.join("bin/python")
}

#[test]
fn a_python_without_the_packages_is_named_with_what_it_lacks_and_the_fixes() {
    // Only where a Python with gymnasium exists: the advice must be true on this machine.
    let Some(_) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bare = bare_python(&dir.path().join("venv"));
    let error = describe(&GymTarget::new("CartPole-v1", &bare), TIMEOUT).unwrap_err();
    let GymError::Setup(text) = &error else {
        panic!("not a setup error: {error}")
    };
    assert!(text.contains(&bare.display().to_string()), "{text}");
    assert!(
        text.contains("no numpy and no gymnasium"),
        "names both at once: {text}"
    );
    for fix in ["STRATA_PYTHON", "runtime.python", "requirements-gym.txt"] {
        assert!(text.contains(fix), "no `{fix}`: {text}");
    }
    assert!(!text.contains("Traceback"), "{text}");
}

/// A child that announces a huge message is refused before anything is allocated for it.
#[test]
fn a_message_longer_than_any_the_protocol_has_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Stands in for Python: takes the program, then announces 2 GiB on the reply socket.
    let fake = dir.path().join("python");
    std::fs::write(
        &fake,
        "#!/bin/sh\ncat >/dev/null\nwhile [ $# -gt 0 ]; do [ \"$1\" = --reply-fd ] && fd=$2; shift; done\n\
         eval \"printf '\\377\\377\\377\\177' >&$fd\"\nsleep 5\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = std::time::Instant::now();
    let error = describe(&GymTarget::new("Anything-v0", &fake), TIMEOUT).unwrap_err();
    assert!(
        matches!(&error, GymError::Protocol(m) if m.contains("2147483647 bytes")),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(4), "not waited out");
}

#[test]
fn a_factory_module_that_is_not_found_points_at_python_path() {
    let Some(py) = python() else { return };
    let missing = GymTarget::new("no_such_pkg.envs:make_env", &py);
    let error = describe(&missing, TIMEOUT).unwrap_err();
    let GymError::Setup(text) = &error else {
        panic!("not a setup error: {error}")
    };
    assert!(text.contains("`no_such_pkg.envs`"), "{text}");
    assert!(text.contains("runtime.python_path"), "{text}");
    // A module that is found but fails while importing keeps its own traceback.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("broken_env_module.py"),
        "import no_such_dependency\n",
    )
    .unwrap();
    let mut broken = GymTarget::new("broken_env_module:make_env", &py);
    broken.python_path.push(dir.path().to_path_buf());
    let error = describe(&broken, TIMEOUT).unwrap_err();
    assert!(
        matches!(&error, GymError::Raised { traceback } if traceback.contains("no_such_dependency")),
        "{error}"
    );
}

#[test]
fn keyword_arguments_reach_the_env() {
    let Some(py) = python() else { return };
    let mut t = target(&py, "strata_test_envs:make_dict_env");
    t.kwargs.insert("limit".into(), 3.into());
    let mut envs = start(&t, 1, 1, None).unwrap();
    let mut batch = StepBatch::new(envs.spec(), 1);
    envs.reset(0, &mut batch.obs).unwrap();
    for step in 1..=3 {
        envs.step(&[0.0, 0.0], &mut batch).unwrap();
        assert_eq!(
            batch.truncated[0],
            step == 3,
            "a limit of 3, not the default 6"
        );
    }
    // A keyword the env does not take is Python's error, passed on.
    t.kwargs.insert("no_such_argument".into(), 1.into());
    let error = describe(&t, TIMEOUT).unwrap_err().to_string();
    assert!(error.contains("no_such_argument"), "{error}");
}

#[test]
fn action_bounds_that_f32_cannot_hold_exactly_start() {
    // Humanoid's are +-0.4: the env's f32 bound is 0.4000000059604645 as a Python float,
    // the layout Strata hands the env process says 0.4.
    let Some(py) = python() else { return };
    let mut t = target(&py, "strata_test_envs:make_dict_env");
    t.kwargs.insert("bound".into(), 0.4.into());
    let mut envs = start(&t, 1, 1, None).unwrap();
    let mut batch = StepBatch::new(envs.spec(), 1);
    envs.reset(0, &mut batch.obs).unwrap();
    envs.step(&[0.4, -0.4], &mut batch).unwrap();
}

/// Breakout through the `atari` wrapper: 4 stacked 84x84 grey frames, rewards clipped to
/// their sign, an episode to train on per life, and the whole game counted with its raw
/// score and steps.
#[test]
fn the_atari_wrapper_trains_on_lives_and_counts_whole_games_at_their_raw_score() {
    let Some(py) = python() else { return };
    let mut t = target(&py, "ALE/Breakout-v5");
    t.kwargs.insert("frameskip".into(), 1.into());
    t.wrappers = vec!["atari".into()];
    let layout = describe(&t, TIMEOUT).unwrap();
    assert_eq!(layout.images[0].shape, [4, 84, 84]);
    assert_eq!(layout.images[0].order, ChannelOrder::Chw);
    let n = 2;
    let mut envs = GymVecEnv::start(
        "gym:ALE/Breakout-v5",
        &t,
        &layout,
        n,
        &GymOptions::default(),
    )
    .unwrap();
    let spec = envs.spec().clone();
    let mut batch = StepBatch::new(&spec, n);
    envs.reset(3, &mut batch.obs).unwrap();
    // Per env: the clipped rewards and steps of the game so far, lives lost in it.
    let (mut clipped, mut steps, mut lives_lost) = (vec![0.0; n], vec![0u32; n], vec![0; n]);
    let mut games = Vec::new();
    let mut t_step = 0usize;
    while games.len() < n && t_step < 20_000 {
        // FIRE, RIGHT, RIGHT, LEFT, LEFT, NOOP: the paddle sweeps and hits now and then.
        let a = [1.0, 2.0, 2.0, 3.0, 3.0, 0.0][t_step % 6];
        envs.step(&[a, a], &mut batch).unwrap();
        t_step += 1;
        for i in 0..n {
            let r = batch.rewards[i];
            assert!([-1.0, 0.0, 1.0].contains(&r), "clipped to its sign: {r}");
            clipped[i] += f64::from(r);
            steps[i] += 1;
            if !batch.done(i) {
                continue;
            }
            let end = batch.episodes.iter().find(|e| e.env == i).unwrap();
            if end.counted {
                games.push((i, *end, clipped[i], steps[i], lives_lost[i]));
                (clipped[i], steps[i], lives_lost[i]) = (0.0, 0, 0);
            } else {
                assert!(
                    batch.terminated[i],
                    "a lost life ends its episode as terminal"
                );
                lives_lost[i] += 1;
            }
        }
    }
    assert_eq!(games.len(), n, "two whole games within {t_step} steps");
    for (i, end, clipped, steps, lives) in games {
        assert_eq!(
            lives, 4,
            "env {i}: Breakout's five lives, the fifth ends the game"
        );
        assert_eq!(
            end.length, steps,
            "env {i}: the game's steps across its lives"
        );
        assert_eq!(end.episode_return.fract(), 0.0, "a raw score");
        // Breakout's bricks are worth 1, 4 or 7: the raw score is at least the count of
        // rewarded steps.
        assert!(
            end.episode_return >= clipped,
            "env {i}: {end:?} against {clipped}"
        );
    }
}

#[test]
fn an_env_started_to_record_writes_its_first_envs_pictures() {
    let Some(py) = python() else { return };
    let mut t = target(&py, "ALE/Breakout-v5");
    let layout = describe(&t, TIMEOUT).unwrap();
    t.kwargs.insert("render_mode".into(), "rgb_array".into());
    let dir = tempfile::tempdir().unwrap();
    let options = GymOptions {
        record: Some(dir.path().join("frames")),
        ..GymOptions::default()
    };
    let mut envs = GymVecEnv::start("gym:ALE/Breakout-v5", &t, &layout, 2, &options).unwrap();
    envs.record().unwrap();
    let mut batch = StepBatch::new(envs.spec(), 2);
    envs.reset(1, &mut batch.obs).unwrap();
    let first = envs.take_frames().unwrap();
    // The start's reset in `start` and this one.
    assert!(first.iter().all(|f| f.episode_start) && !first.is_empty());
    assert_eq!((first[0].width, first[0].height), (160, 210));
    for _ in 0..5 {
        envs.step(&[0.0, 0.0], &mut batch).unwrap();
    }
    let frames = envs.take_frames().unwrap();
    assert_eq!(frames.len(), 5, "one a step of env 0");
    assert!(frames
        .iter()
        .all(|f| !f.episode_start && f.rgb.len() == 160 * 210 * 3));
    let mut plain = start(&target(&py, "CartPole-v1"), 1, 1, None).unwrap();
    let error = plain.record().unwrap_err().to_string();
    assert!(error.contains("cannot be recorded"), "{error}");
}
