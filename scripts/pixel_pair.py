#!/usr/bin/env python3
"""Strata's pixel presets against Stable-Baselines3's PPO at the same recipe: whole
commands, steps per second of wall clock, taking turns in one run.

Each round runs `strata train --env gym:ENV` (its preset) and then SB3 with the same
hyperparameters, the same network and the same env processing, for the same steps (whole
updates; SB3's value clipping keeps the clipped prediction alone,
CleanRL's the larger loss, which changes nothing in the time taken); the ratio is taken within the round, since a shared machine's speed drifts from
minute to minute. The wall clock is the whole command's: process start, env start and
model setup included, evaluations off on both sides.

  * Atari (`ALE/Breakout-v5`): SB3's `make_atari_env` (its `AtariWrapper`: up to 30
    no-ops, 4 frames a step max-pooled, 84x84 grey, a life per episode, FIRE at reset,
    rewards clipped) with 4 frames stacked, the env made with `frameskip=1` as Strata's
    preset makes it; `CnnPolicy` (NatureCNN, 512 features, the heads on them); CleanRL's
    `ppo_atari` hyperparameters, 8 envs x 128 steps (updates of 1,024 steps), 4 epochs of
    256-step minibatches.
  * MinAtar (`MinAtar/Breakout-v1`, ...): the MinAtar agent's encoder as an SB3 features
    extractor (one 16-filter 3x3 convolution, 128 features), 64-64 tanh layers before
    each head; the preset's pgx recipe, 256 envs x 128 steps (updates of 32,768 steps), 3
    epochs of 1,024-step minibatches, learning rate 3e-4, clip 0.2.

SB3 gets as many torch threads as Strata's learner has (`--threads`, this machine's CPU
count by default), its envs in one process as `make_atari_env` makes them (`--sb3-vec
subproc` puts each in a process of its own).

Usage:
  pixel_pair.py [--env ALE/Breakout-v5] [--steps 24576] [--rounds 2] [--strata PATH]
                [--strata-set KEY=VALUE ...] [--threads N] [--sb3-vec dummy|subproc]
                [--out FILE]
Runs under a Python with stable-baselines3, torch, gymnasium, ale-py and minatar;
Strata's env processes use STRATA_PYTHON (this Python when unset).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


# Each family's recipe, as Strata's presets have it: envs, SB3's PPO arguments, the
# layers between the features and the heads.
COMMON = dict(n_steps=128, gamma=0.99, gae_lambda=0.95, ent_coef=0.01, vf_coef=0.5,
              max_grad_norm=0.5)
ATARI = dict(n_envs=8, net_arch=[], ppo=dict(
    COMMON, batch_size=256, n_epochs=4, learning_rate=lambda left: 2.5e-4 * left,
    clip_range=0.1, clip_range_vf=0.1))
MINATAR = dict(n_envs=256, net_arch=dict(pi=[64, 64], vf=[64, 64]), ppo=dict(
    COMMON, batch_size=1024, n_epochs=3, learning_rate=3e-4, clip_range=0.2,
    clip_range_vf=0.2))


def recipe(env_id):
    return ATARI if env_id.startswith("ALE/") else MINATAR


def update_steps(env_id):
    """Env steps in one update of the preset."""
    r = recipe(env_id)
    return r["n_envs"] * r["ppo"]["n_steps"]


def sb3_run(env_id, steps, threads, vec, seed):
    """One SB3 training run in this process; returns nothing (the parent times it)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack

    torch.set_num_threads(threads)
    vec_cls = SubprocVecEnv if vec == "subproc" else DummyVecEnv
    # Forked env processes inherit the registrations made below; spawned ones would not.
    vec_kwargs = dict(start_method="fork") if vec == "subproc" else None
    family = recipe(env_id)
    hyper = dict(family["ppo"], seed=seed, device="cpu", verbose=0)
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
        env = make_atari_env(env_id, n_envs=family["n_envs"], seed=seed, vec_env_cls=vec_cls,
                             vec_env_kwargs=vec_kwargs, env_kwargs={"frameskip": 1})
        env = VecFrameStack(env, n_stack=4)
        model = PPO("CnnPolicy", env, **hyper)
    else:
        import minatar  # noqa: F401  (its package registers the MinAtar ids)
        from importlib.metadata import entry_points

        for point in entry_points(group="gymnasium.envs"):
            if point.name == env_id.split("/")[0]:
                point.load()()

        class ChannelsFirst(gym.ObservationWrapper):
            def __init__(self, env):
                super().__init__(env)
                h, w, c = env.observation_space.shape
                self.observation_space = gym.spaces.Box(0.0, 1.0, (c, h, w), np.float32)

            def observation(self, obs):
                return np.transpose(obs, (2, 0, 1)).astype(np.float32)

        class MinAtarCnn(BaseFeaturesExtractor):
            def __init__(self, space):
                super().__init__(space, features_dim=128)
                c, h, w = space.shape
                self.net = torch.nn.Sequential(
                    torch.nn.Conv2d(c, 16, 3, 1), torch.nn.ReLU(), torch.nn.Flatten(),
                    torch.nn.Linear(16 * (h - 2) * (w - 2), 128), torch.nn.ReLU())

            def forward(self, obs):
                return self.net(obs)

        env = make_vec_env(env_id, n_envs=family["n_envs"], seed=seed, vec_env_cls=vec_cls,
                           vec_env_kwargs=vec_kwargs, wrapper_class=ChannelsFirst)
        model = PPO("CnnPolicy", env, policy_kwargs=dict(
            features_extractor_class=MinAtarCnn, normalize_images=False,
            net_arch=family["net_arch"]),
            **hyper)
    model.learn(total_timesteps=steps)
    env.close()


def timed(cmd, env=None):
    """Runs `cmd`, returns its wall-clock seconds and its output; fails loudly."""
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=7200)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, done.stdout + done.stderr


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "sb3":
        p = argparse.ArgumentParser()
        p.add_argument("sb3")
        p.add_argument("--env", required=True)
        p.add_argument("--steps", type=int, required=True)
        p.add_argument("--threads", type=int, required=True)
        p.add_argument("--vec", default="dummy")
        p.add_argument("--seed", type=int, default=1)
        a = p.parse_args()
        sb3_run(a.env, a.steps, a.threads, a.vec, a.seed)
        return

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="ALE/Breakout-v5")
    p.add_argument("--steps", type=int, default=24576)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--strata", default="target/release/strata")
    p.add_argument("--strata-set", action="append", default=[],
                   help="a --set for Strata's runs (repeatable)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--sb3-vec", choices=["dummy", "subproc"], default="dummy")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="append one JSON line per run to this file")
    a = p.parse_args()
    update = update_steps(a.env)
    if a.steps % update:
        sys.exit(f"--steps {a.steps}: must be whole updates of {update} steps for {a.env}, "
                 "which both sides train in")

    strata_env = dict(os.environ)
    strata_env.setdefault("STRATA_PYTHON", sys.executable)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(a.rounds):
            run_dir = os.path.join(scratch, f"run{round_}")
            cmd = [a.strata, "train", "--env", f"gym:{a.env}", "--seed", str(a.seed),
                   "--max-steps", str(a.steps), "--run-dir", run_dir,
                   "--set", "report.eval_episodes=0",
                   "--set", f"train.learner_threads={a.threads}"]
            for s in a.strata_set:
                cmd += ["--set", s]
            wall, out = timed(cmd, strata_env)
            reported = re.search(r"(\d+) steps in [\d.]+s", out)
            if not reported:
                sys.exit(f"no step count in Strata's output:\n{out[-2000:]}")
            steps = int(reported.group(1))
            rows.append(dict(system="strata", round=round_, env=a.env, steps=steps,
                             wall_s=wall, sets=a.strata_set))
            wall, _ = timed([sys.executable, __file__, "sb3", "--env", a.env, "--steps",
                             str(a.steps), "--threads", str(a.threads), "--vec", a.sb3_vec,
                             "--seed", str(a.seed)])
            rows.append(dict(system="sb3", round=round_, env=a.env, steps=a.steps,
                             wall_s=wall, threads=a.threads, vec=a.sb3_vec))
            s, b = rows[-2], rows[-1]
            print(f"round {round_ + 1}: strata {s['steps'] / s['wall_s']:.0f} steps/s "
                  f"({s['wall_s']:.1f} s), sb3 {b['steps'] / b['wall_s']:.0f} steps/s "
                  f"({b['wall_s']:.1f} s): {b['wall_s'] / s['wall_s'] * s['steps'] / b['steps']:.2f}x",
                  flush=True)
    ratios = []
    for round_ in range(a.rounds):
        s, b = (r for r in rows if r["round"] == round_)
        ratios.append((s["steps"] / s["wall_s"]) / (b["steps"] / b["wall_s"]))
    print(f"{a.env}, {a.steps} steps, {a.threads} thread(s): Strata at "
          f"{statistics.median(ratios):.2f}x SB3's steps/s (rounds "
          f"{min(ratios):.2f}-{max(ratios):.2f}x)")
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                r["steps_per_s"] = r["steps"] / r["wall_s"]
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
