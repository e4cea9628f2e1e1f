#!/usr/bin/env python3
"""Record reference trajectories from Gymnasium for Strata's built-in environments.

For each env: several start states (sampled by Gymnasium's own reset, plus hand-picked
edge cases) and seeded action sequences (continuous ones deliberately exceed the bounds to
exercise the env's own handling of out-of-range actions). Each step records the internal state (f64), the float32 observation,
the reward and the terminated/truncated flags, through `gymnasium.make` so the time limit
is the registered one. Writes `fixtures/gymnasium/<env>.json`; replayed by
`crates/env/tests/gymnasium_fixtures.rs`.

    pip install "gymnasium==1.4.0" "numpy==2.4.6"
    python3 scripts/record_gymnasium_fixtures.py
"""

import json
import pathlib

import gymnasium as gym
import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "gymnasium"

ENVS = {
    # strata name: (gymnasium id, action sampler, extra start states)
    "cartpole": ("CartPole-v1", lambda rng: int(rng.integers(2)), [[0.0, 0.0, 0.2, 0.0]]),
    "pendulum": (
        "Pendulum-v1",
        lambda rng: np.float32(rng.uniform(-3.0, 3.0)),
        [[np.pi, 0.0], [-3.0, 7.9]],
    ),
    "acrobot": ("Acrobot-v1", lambda rng: int(rng.integers(3)), [[0.5, -0.5, 1.0, -2.0]]),
    "mountaincar-continuous": (
        "MountainCarContinuous-v0",
        lambda rng: np.float32(rng.uniform(-1.5, 1.5)),
        [[-1.19, 0.0], [0.44, 0.0]],
    ),
}

# Each case runs until the episode ends or this many steps.
MAX_STEPS = {"cartpole": 500, "pendulum": 200, "acrobot": 500, "mountaincar-continuous": 999}


def as_float(x):
    return float(np.asarray(x, dtype=np.float64))


def record_case(env_id, name, start, sampler, action_seed, bang_bang=False):
    env = gym.make(env_id)
    env.reset(seed=action_seed)
    dtype = env.unwrapped.state.dtype
    if start is not None:
        env.unwrapped.state = np.array(start, dtype=dtype)
    start_state = [float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)]
    rng = np.random.default_rng(action_seed)
    actions, steps = [], []
    for t in range(MAX_STEPS[name]):
        if bang_bang and name == "cartpole":
            # Balance with a simple feedback law: reaches the time limit, so truncation is tested.
            s = env.unwrapped.state
            a = int(s[2] + 0.5 * s[3] + 0.05 * s[0] + 0.1 * s[1] > 0)
        elif bang_bang and name == "acrobot":
            # Pump energy with the second joint's velocity: swings up, so termination is tested.
            a = 2 if env.unwrapped.state[3] >= 0 else 0
        elif bang_bang:
            # Swing with the velocity: reaches MountainCar's goal, so termination is tested.
            a = np.float32(1.0 if env.unwrapped.state[1] >= 0 else -1.0)
        else:
            a = sampler(rng)
        action_array = np.array([a], dtype=np.float32) if isinstance(a, np.float32) else a
        obs, reward, terminated, truncated, _ = env.step(action_array)
        actions.append(as_float(a))
        steps.append(
            {
                "state": [float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)],
                "obs": [float(v) for v in obs],
                "reward": as_float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
            }
        )
        if terminated or truncated:
            break
    env.close()
    return {"start_state": start_state, "actions": actions, "steps": steps}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (env_id, sampler, extra) in ENVS.items():
        cases = [record_case(env_id, name, None, sampler, seed) for seed in (0, 1, 2)]
        cases += [record_case(env_id, name, s, sampler, 10 + i) for i, s in enumerate(extra)]
        if name in ("mountaincar-continuous", "cartpole", "acrobot"):
            cases.append(record_case(env_id, name, None, sampler, 42, bang_bang=True))
        doc = {
            "env": name,
            "gymnasium_id": env_id,
            "gymnasium_version": gym.__version__,
            "numpy_version": np.__version__,
            "cases": cases,
        }
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(f"{path}: {len(cases)} cases, {sum(len(c['steps']) for c in cases)} steps")


if __name__ == "__main__":
    main()
