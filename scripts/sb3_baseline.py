#!/usr/bin/env python3
"""Trains Stable-Baselines3's PPO with rl-zoo3's hyperparameters on a Gymnasium task and
writes one JSON line: final greedy return over fresh episodes, wall-clock seconds, steps.

The baseline Strata's gym presets are compared against (docs/environments.md, "Gymnasium environments in worker processes").
rl-zoo3 has no entry for the v5 MuJoCo tasks: HalfCheetah-v5 and Hopper-v5 take its v4
entries (same bodies and rewards), Pusher-v5 its `mujoco-defaults` (VecNormalize and
SB3's defaults), as `python -m rl_zoo3.train` would for a task it does not list.

Usage: sb3_baseline.py ENV_ID --seed S [--steps N] [--eval-episodes 10] [--out FILE]
Needs: pip install stable-baselines3 rl_zoo3 "gymnasium[mujoco]" (torch on the CPU).
"""
import argparse
import json
import sys
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

# rl-zoo3 2.9 hyperparams/ppo.yml, by the entry each task uses.
ZOO = {
    "HalfCheetah-v5": dict(
        n_envs=1, batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
        ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92,
        max_grad_norm=0.8, vf_coef=0.58096,
        policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                           net_arch=dict(pi=[256, 256], vf=[256, 256])),
    ),
    "Hopper-v5": dict(
        n_envs=1, batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
        ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99,
        max_grad_norm=0.7, vf_coef=0.835671,
        policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                           net_arch=dict(pi=[256, 256], vf=[256, 256])),
    ),
    # mujoco-defaults: VecNormalize over SB3's PPO defaults.
    "Pusher-v5": dict(n_envs=1),
}


def evaluate(model, env_id, stats, episodes, seed):
    """Greedy return over fresh episodes, observations normalised with the frozen stats."""
    env = gym.make(env_id)
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed * 1000 + k)
        done, total = False, 0.0
        while not done:
            norm = np.clip((obs - stats.obs_rms.mean) / np.sqrt(stats.obs_rms.var + stats.epsilon),
                           -stats.clip_obs, stats.clip_obs)
            action, _ = model.predict(norm, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env", choices=sorted(ZOO))
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", default="-")
    args = parser.parse_args()

    torch.set_num_threads(1)
    params = dict(ZOO[args.env])
    n_envs = params.pop("n_envs")
    gamma = params.get("gamma", 0.99)
    env = VecNormalize(make_vec_env(args.env, n_envs=n_envs, seed=args.seed), gamma=gamma)
    model = PPO("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **params)
    started = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    seconds = time.perf_counter() - started
    returns = evaluate(model, args.env, env, args.eval_episodes, args.seed)
    line = json.dumps({
        "env": args.env, "seed": args.seed, "steps": args.steps, "train_seconds": seconds,
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
