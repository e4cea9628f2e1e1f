#!/usr/bin/env python3
"""Trains sb3-contrib's RecurrentPPO with rl-zoo3's `ppo_lstm` preset on a masked-velocity
task and writes one JSON line: steps and seconds to solve, final greedy return, wall clock.

The baseline Strata's `cartpole-novel` and `pendulum-novel` presets are compared against
(docs/policies.md). The tasks hide the velocities as rl-zoo3's
`MaskVelocityWrapper` does (CartPole keeps indices 0 and 2, Pendulum 0 and 1). "Solved"
is Strata's rule: the mean return of the last 20 training episodes at or above the
task's threshold (475 for CartPole; Pendulum has none, so -200).

Usage: sb3_recurrent_baseline.py {CartPoleNoVel-v1,PendulumNoVel-v1} --seed S
       [--steps N] [--eval-episodes 10] [--out FILE]
Needs: pip install sb3-contrib gymnasium (torch on the CPU).
"""
import argparse
import json
import sys
import time

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

POLICY = dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
              enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64]))


def linear(start):
    return lambda remaining: remaining * start


# rl-zoo3 2.9 hyperparams/ppo_lstm.yml.
ZOO = {
    "CartPoleNoVel-v1": dict(
        base="CartPole-v1", keep=[0, 2], threshold=475.0, n_envs=8, norm_reward=False,
        params=dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2)),
    ),
    "PendulumNoVel-v1": dict(
        base="Pendulum-v1", keep=[0, 1], threshold=-200.0, n_envs=4, norm_reward=True,
        params=dict(n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                    learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4),
    ),
}


class MaskVelocity(gym.ObservationWrapper):
    """Keeps only the observation values at `keep`."""

    def __init__(self, env, keep):
        super().__init__(env)
        self.keep = np.array(keep)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[self.keep], space.high[self.keep],
                                                dtype=np.float32)

    def observation(self, observation):
        return observation[self.keep].astype(np.float32)


class Solved(BaseCallback):
    """Notes the step and second at which the last 20 training episodes first average at
    least `threshold`."""

    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold
        self.returns = []
        self.step = None
        self.seconds = None
        self.started = time.perf_counter()

    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.returns = (self.returns + [info["episode"]["r"]])[-20:]
        if (self.step is None and len(self.returns) == 20
                and np.mean(self.returns) >= self.threshold):
            self.step = self.num_timesteps
            self.seconds = time.perf_counter() - self.started
        return True


def evaluate(model, task, stats, episodes, seed):
    """Greedy return over fresh episodes, carrying the LSTM state through each."""
    spec = ZOO[task]
    env = MaskVelocity(gym.make(spec["base"]), spec["keep"])
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed * 1000 + k)
        state, start, done, total = None, np.ones((1,), bool), False, 0.0
        while not done:
            norm = np.clip((obs - stats.obs_rms.mean) / np.sqrt(stats.obs_rms.var + stats.epsilon),
                           -stats.clip_obs, stats.clip_obs)
            action, state = model.predict(norm[None], state=state, episode_start=start,
                                          deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action[0])
            start = np.zeros((1,), bool)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(ZOO))
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", default="-")
    args = parser.parse_args()

    torch.set_num_threads(1)
    spec = ZOO[args.task]
    env = make_vec_env(spec["base"], n_envs=spec["n_envs"], seed=args.seed,
                       wrapper_class=MaskVelocity, wrapper_kwargs=dict(keep=spec["keep"]))
    env = VecNormalize(env, norm_reward=spec["norm_reward"], gamma=spec["params"]["gamma"])
    model = RecurrentPPO("MlpLstmPolicy", env, seed=args.seed, device="cpu", verbose=0,
                         policy_kwargs=POLICY, **spec["params"])
    solved = Solved(spec["threshold"])
    started = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=solved)
    seconds = time.perf_counter() - started
    returns = evaluate(model, args.task, env, args.eval_episodes, args.seed)
    line = json.dumps({
        "task": args.task, "seed": args.seed, "steps": args.steps, "train_seconds": seconds,
        "solved_at_step": solved.step, "solved_at_seconds": solved.seconds,
        "greedy_return_mean": float(np.mean(returns)), "greedy_returns": returns,
    })
    if args.out == "-":
        print(line)
    else:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
