"""strata.train / load / predict / evaluate against the real trainer."""
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import strata

REPO = Path(__file__).resolve().parents[2]


def test_cartpole_trains_to_475_and_its_policy_predicts(tmp_path):
    summary = strata.train(
        "CartPole-v1", config={"train": {"stop_when_solved": True}}, run_dir=tmp_path / "run",
        seed=2, max_steps=150_000, progress=False)
    assert summary["solved"] and summary["final_mean_return"] >= 475
    assert summary["env"] == "cartpole", "CartPole-v1 runs as its built-in twin"
    assert summary["run_dir"] == str(tmp_path / "run")
    policy = strata.load(summary["run_dir"])
    assert policy.obs_dim == 4 and policy.action_space == ("discrete", 2)
    assert policy.policy_version == summary["policy_version"], "the final checkpoint by default"
    best = strata.load(summary["run_dir"], best=True)
    best_eval = json.loads((tmp_path / "run" / "best" / "eval.json").read_text())
    assert best.policy_version == best_eval["policy_version"]
    with pytest.raises(ValueError, match="not both"):
        strata.load(summary["run_dir"], version=1, best=True)
    result = strata.evaluate(policy, episodes=10, seed=7)
    assert result["mean_return"] >= 475, result
    # One observation gives a 0-d action, a batch one per row, float64 or float32 alike.
    obs = np.random.default_rng(0).normal(0, 0.05, (6, 4))
    batch, state = policy.predict(obs)
    assert state is None and batch.shape == (6,) and batch.dtype == np.int64
    for row, action in zip(obs, batch):
        single, _ = policy.predict(row.astype(np.float32))
        assert single.shape == () and int(single) == int(action)
    assert policy.predict(obs.tolist())[0].tolist() == batch.tolist()
    # Sampled actions are valid indices.
    sampled, _ = policy.predict(obs, deterministic=False)
    assert set(sampled.tolist()) <= {0, 1}


def test_bad_input_gets_a_clear_error(tmp_path):
    summary = strata.train("cartpole", run_dir=tmp_path / "run", max_steps=512, progress=False)
    policy = strata.load(summary["run_dir"])
    with pytest.raises(ValueError, match=r"expects \(4,\) or \(n, 4\)"):
        policy.predict(np.zeros(5))
    with pytest.raises(ValueError, match="not finite"):
        policy.predict(np.array([0.0, np.nan, 0.0, 0.0]))
    with pytest.raises(strata.ConfigError, match="learning_rat"):
        strata.train("cartpole", config={"ppo.learning_rat": 1.0}, progress=False)
    with pytest.raises(strata.ConfigError, match="gamma"):
        strata.train("cartpole", config={"ppo": {"gamma": 1.5}}, progress=False)
    with pytest.raises(strata.StrataError, match="checkpoint"):
        strata.load(tmp_path / "nothing-here")


def test_config_layers_nested_and_dotted_keys_over_the_preset():
    text = strata.config("cartpole", {"ppo": {"n_epochs": 3}, "train.seed": 9,
                                      "ppo.target_kl": None})
    assert "n_epochs = 3" in text and "seed = 9" in text and 'target_kl = "none"' in text
    assert "n_steps = 32" in text, "the rest is CartPole's preset"


def test_resume_continues_exactly_where_the_run_stopped(tmp_path):
    whole = strata.train("cartpole", run_dir=tmp_path / "whole", max_steps=2048,
                         deterministic=True, config={"train.checkpoint_every": 1024},
                         progress=False)
    middle = tmp_path / "whole" / "checkpoints" / "step-1024"
    resumed = strata.train(resume=middle, run_dir=tmp_path / "resumed", progress=False)
    assert resumed["total_steps"] == 2048
    assert resumed["final_mean_return"] == whole["final_mean_return"]
    assert resumed["config_hash"] == whole["config_hash"]
    first = strata.load(tmp_path / "whole")
    again = strata.load(tmp_path / "resumed")
    obs = np.random.default_rng(1).normal(0, 0.1, (32, 4))
    assert (first.predict(obs)[0] == again.predict(obs)[0]).all()
    with pytest.raises(strata.ConfigError, match="resume keeps"):
        strata.train(resume=middle, config={"ppo.n_epochs": 3}, progress=False)


def files(root):
    return sorted((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file())


def test_a_run_directory_holding_a_run_is_refused_or_moved_aside(tmp_path):
    run = tmp_path / "run"
    strata.train("cartpole", run_dir=run, max_steps=1024, progress=False)
    before = files(run)
    with pytest.raises(strata.StrataError, match="already holds a run"):
        strata.train("cartpole", run_dir=run, max_steps=1024, progress=False)
    assert files(run) == before, "a refused run changed nothing"
    strata.train("cartpole", run_dir=run, max_steps=512, overwrite=True, progress=False)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(aside) == 1 and files(aside[0]) == before, "the old run moved aside, whole"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2, "a fresh run"


def children(pid):
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_endless_training(run, env="gym:CartPole-v1", config=None):
    """A child Python training `env` in Gymnasium env processes until interrupted, once it
    has checkpointed and its env processes run; returns it and those processes."""
    config = {"train.checkpoint_every": 256, "report.eval_episodes": 0, **(config or {})}
    program = textwrap.dedent(f"""
        import strata
        strata.train({env!r}, run_dir={str(run)!r}, max_steps=10**9, config={config!r},
                     progress=False)
    """)
    child = subprocess.Popen([sys.executable, "-c", program], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (run / "checkpoints").exists() or len(children(child.pid)) < 1:
        assert time.monotonic() < deadline and child.poll() is None, child.stderr.read()
        time.sleep(0.05)
    return child, children(child.pid)


def wait_for_exit(child, seconds=120):
    """The child's stderr once it exits; past `seconds`, fails with its threads' stacks (a
    hang detector: a stop takes about a second)."""
    try:
        return child.communicate(timeout=seconds)[1]
    except subprocess.TimeoutExpired:
        stacks = subprocess.run(
            ["gdb", "-p", str(child.pid), "-batch", "-ex", "thread apply all bt 30"],
            capture_output=True, text=True, timeout=120, check=False,
        ).stdout if shutil.which("gdb") else "(no gdb for the stacks)"
        child.kill()
        err = child.communicate()[1]
        pytest.fail(f"still running {seconds} s after SIGINT\n{err}\n{stacks}")


def test_ctrl_c_stops_with_a_checkpoint_and_no_env_process_left(tmp_path, gymnasium):
    run = tmp_path / "run"
    child, envs = start_endless_training(run)
    child.send_signal(signal.SIGINT)
    err = wait_for_exit(child)
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err
    assert "Ctrl-C again to leave at once" in err, err
    assert (run / "checkpoint" / "meta.json").exists(), "the stop was checkpointed"
    assert not any(alive(p) for p in envs), f"env processes left: {envs}"
    policy = strata.load(run)
    assert policy.policy_version > 0


def test_a_second_ctrl_c_leaves_at_once_and_no_env_process_is_left(tmp_path, gymnasium):
    run, slow = tmp_path / "run", tmp_path / "slow"
    # Once `slow` exists each env step takes 20 ms, so the orderly stop's final evaluation
    # (200 episodes of at least 8 steps) takes over 30 s: the second Ctrl-C lands during
    # it however loaded the machine is.
    child, envs = start_endless_training(
        run, env="gym:strata_test_envs:make_slow_when_flagged",
        config={"runtime.python_path": [str(REPO / "crates/env/tests/python")],
                "env.gym.kwargs": {"flag": str(slow)}, "report.eval_episodes": 200})
    slow.touch()
    child.send_signal(signal.SIGINT)
    # The second once the first is being handled (both at once would be seen as one).
    said, deadline = "", time.monotonic() + 60
    while "Ctrl-C again" not in said and time.monotonic() < deadline:
        if select.select([child.stderr], [], [], 1)[0]:
            line = child.stderr.readline()
            if not line:
                break
            said += line
    second = time.monotonic()
    child.send_signal(signal.SIGINT)
    err = said + wait_for_exit(child)
    assert child.returncode != 0 and err.count("KeyboardInterrupt") == 1, err
    assert time.monotonic() - second < 20, "left at once, not after the orderly stop"
    deadline = time.monotonic() + 10
    while any(alive(p) for p in envs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in envs), f"env processes left: {envs}"
    # The periodic checkpoints are whole: the run loads.
    assert strata.load(run).policy_version > 0


def test_a_gym_factory_env_trains_from_python(tmp_path, gymnasium):
    summary = strata.train(
        "gym:strata_test_envs:make_dict_env", run_dir=tmp_path / "run", max_steps=4096,
        config={"runtime": {"python_path": [str(REPO / "crates/env/tests/python")]},
                "env.gym.kwargs": {"limit": 5}},
        progress=False)
    assert summary["total_steps"] == 4096
    policy = strata.load(summary["run_dir"])
    assert policy.obs_dim == 7 and policy.action_space[0] == "box"
    action, _ = policy.predict(np.zeros(7))
    assert action.shape == (2,) and np.all(np.abs(action) <= 1.0), "clipped to the Box"
    assert 'observation = "Dict(flags=MultiBinary(2,), mode=Discrete(3), pos=Box(2,))"' in policy.config


def test_an_image_policy_predicts_on_pictures_as_the_env_gives_them(tmp_path, gymnasium):
    # Channels-first pictures of 2 channels: the square lies left (action 0) or right (1).
    summary = strata.train(
        "gym:strata_test_envs:make_pixel_env", run_dir=tmp_path / "run", max_steps=20480,
        config={"runtime": {"python_path": [str(REPO / "crates/env/tests/python")]},
                "env.gym.kwargs": {"order": "chw", "channels": 2},
                "network": {"policy_hidden": [], "value_hidden": []}},
        progress=False)
    policy = strata.load(summary["run_dir"])
    assert policy.obs_dim == 12 * 12 * 2
    pictures = np.zeros((2, 2, 12, 12), np.uint8)
    pictures[0, :, 4:7, 1:4] = 255  # left
    pictures[1, :, 4:7, 8:11] = 255  # right
    actions, _ = policy.predict(pictures)
    assert actions.tolist() == [0, 1]
    # One picture, and the same pictures flat and channels-last, agree.
    assert int(policy.predict(pictures[1])[0]) == 1
    flat = pictures.transpose(0, 2, 3, 1).reshape(2, -1).astype(np.float32)
    assert policy.predict(flat)[0].tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"the env's \(2, 12, 12\)"):
        policy.predict(np.zeros((12, 12, 2), np.uint8))
    assert "minatar_cnn" not in policy.config, "auto: the config keeps the choice implicit"


def test_predict_waiting_on_an_evaluation_leaves_other_threads_running(tmp_path):
    import threading

    summary = strata.train("pendulum", run_dir=tmp_path / "run", max_steps=1024, progress=False)
    policy = strata.load(summary["run_dir"])
    # Holds the policy for a second or more, without the GIL.
    evaluating = threading.Thread(target=strata.evaluate, args=(policy,),
                                  kwargs={"episodes": 30000})
    evaluating.start()
    time.sleep(0.1)
    predicting = threading.Thread(target=policy.predict, args=(np.zeros(3),))
    predicting.start()
    time.sleep(0.05)
    ticks, deadline = 0, time.monotonic() + 0.3
    while time.monotonic() < deadline:
        ticks += 1
        time.sleep(0.001)
    still_waiting = predicting.is_alive() and evaluating.is_alive()
    evaluating.join()
    predicting.join()
    assert still_waiting, "the evaluation ended before the check: make it longer"
    assert ticks > 30, f"this thread ran {ticks} times while predict waited"


def test_a_recurrent_policy_predicts_with_its_state(tmp_path):
    # rl-zoo3's CartPoleNoVel-v1 is the built-in cartpole-novel, with its LSTM preset.
    summary = strata.train("CartPoleNoVel-v1", run_dir=tmp_path / "run", max_steps=2048,
                           progress=False)
    assert summary["env"] == "cartpole-novel"
    policy = strata.load(summary["run_dir"])
    assert policy.obs_dim == 2
    width = 2 * (64 + 64)  # an LSTM for each network, hidden and cell states of 64
    obs = np.array([0.01, -0.02], np.float32)
    _, state = policy.predict(obs)
    assert state.shape == (width,) and state.dtype == np.float32
    assert np.abs(state).max() > 0
    _, later = policy.predict(obs, state=state)
    assert not np.array_equal(later, state), "the state goes on"
    # An episode start forgets what came before: as if there were no state.
    _, fresh = policy.predict(obs, state=later, episode_start=np.array([True]))
    np.testing.assert_array_equal(fresh, state)
    batch = np.stack([obs, 2 * obs, 3 * obs])
    actions, states = policy.predict(batch, deterministic=False)
    assert actions.shape == (3,) and states.shape == (3, width)
    np.testing.assert_array_equal(states[0], state)
    with pytest.raises(ValueError, match=f"{width} per observation"):
        policy.predict(batch, state=state)
    with pytest.raises(ValueError, match="episode_start has 2 flags for 3"):
        policy.predict(batch, episode_start=np.array([True, False]))
    result = strata.evaluate(policy, episodes=3, seed=1)
    assert len(result["returns"]) == 3
