#!/usr/bin/env python3
"""Record one PPO update of Stable-Baselines3 on a real MuJoCo task.

SB3's `PPO("MlpPolicy")` with its defaults but a short rollout collects 128 steps of
HalfCheetah-v4 (episodes cut at 50 steps, so the rollout holds two time-limit
truncations and ends inside a third episode), then trains on them: six epochs, each one
minibatch of the whole rollout, so the order SB3 draws the rows in changes nothing but the
order of float sums. The learning rate is ten times SB3's, so that the ratios leave the
clip range (a clip fraction of 0.29 over the epochs) while the global gradient clip is
active throughout. Six epochs, not SB3's ten: in the seventh a sample's ratio lands a
millionth from the clip range's edge, where float rounding alone decides which side it
falls on.

The fixture holds the policy's parameters before and after, the rollout as the env gave
it (rewards before SB3 adds the truncation bootstrap, the flags, V of each final
observation and of the observation after the last step), SB3's advantages and returns,
and the statistics it logged. `crates/algo/tests/sb3_update.rs` loads the same
parameters and rollout into Strata and must land on the same parameters.

    pip install -r python/requirements-gym.txt -r python/requirements-parity.txt
    python3 scripts/record_ppo_fixtures.py

Writes `fixtures/ppo/halfcheetah_sb3_update.json`.
"""

import json
import pathlib

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "ppo"
ENV_ID, EPISODE_STEPS, N_STEPS, N_EPOCHS, SEED = "HalfCheetah-v4", 50, 128, 6, 7
# Ten times SB3's learning rate: within six epochs the ratios leave the clip range, so the
# clipped samples' zero gradient is part of what is compared.
LEARNING_RATE = 3e-3
CLIP = 0.2


class RecordSteps(gym.Wrapper):
    """Keeps each step's reward as the env gave it, its end flags and what it observed."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = []

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps.append((float(reward), bool(terminated), bool(truncated), np.array(obs, dtype=np.float32)))
        return obs, reward, terminated, truncated, info


class AtRolloutEnd(BaseCallback):
    """Copies the rollout buffer and the untrained parameters before SB3's `train()`."""

    def __init__(self):
        super().__init__()
        self.buffer = None
        self.params = None
        self.last_value = None

    def _on_step(self):
        return True

    def _on_rollout_end(self):
        b = self.model.rollout_buffer
        self.buffer = {k: np.array(getattr(b, k)).copy() for k in
                       ("observations", "actions", "rewards", "episode_starts", "values",
                        "log_probs", "advantages", "returns")}
        self.params = {k: v.detach().clone() for k, v in self.model.policy.state_dict().items()}
        with torch.no_grad():
            obs = self.model.policy.obs_to_tensor(self.model._last_obs)[0]
            self.last_value = float(self.model.policy.predict_values(obs)[0, 0])


def floats(x):
    """Float32 values at full float32 precision, flat."""
    return [float(f"{v:.9g}") for v in np.asarray(x, dtype=np.float32).reshape(-1)]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    recorder = RecordSteps(gym.make(ENV_ID, max_episode_steps=EPISODE_STEPS))
    model = PPO("MlpPolicy", recorder, n_steps=N_STEPS, batch_size=N_STEPS, n_epochs=N_EPOCHS,
                learning_rate=LEARNING_RATE, clip_range=CLIP, seed=SEED, device="cpu")
    at_end = AtRolloutEnd()
    # How close any sample's ratio comes to the clip range's edge in any epoch: a ratio
    # within float rounding of it may fall on either side on another machine.
    margins, current = [], {}
    get_batches, evaluate = model.rollout_buffer.get, model.policy.evaluate_actions

    def get_and_keep(*args, **kwargs):
        for batch in get_batches(*args, **kwargs):
            current["old_log_prob"] = batch.old_log_prob
            yield batch

    def evaluate_and_keep(*args, **kwargs):
        values, log_prob, entropy = evaluate(*args, **kwargs)
        with torch.no_grad():
            ratio = torch.exp(log_prob - current["old_log_prob"])
            edge = torch.minimum((ratio - 1 + CLIP).abs(), (ratio - 1 - CLIP).abs())
            margins.append(float(edge.min()))
        return values, log_prob, entropy

    model.rollout_buffer.get, model.policy.evaluate_actions = get_and_keep, evaluate_and_keep
    model.learn(total_timesteps=N_STEPS, callback=at_end)
    assert len(margins) == N_EPOCHS, margins
    after = {k: v.detach().clone() for k, v in model.policy.state_dict().items()}
    steps = recorder.steps[:N_STEPS]
    assert len(steps) == N_STEPS, len(recorder.steps)
    raw = np.array([s[0] for s in steps], dtype=np.float32)
    terminated = [s[1] for s in steps]
    truncated = [s[2] and not s[1] for s in steps]
    assert sum(truncated) == N_STEPS // EPISODE_STEPS and not any(terminated)
    # V(final observation) with the untrained policy, as SB3 computes it while collecting.
    policy = model.policy
    policy.load_state_dict(at_end.params)
    final_values = np.zeros(N_STEPS, dtype=np.float32)
    with torch.no_grad():
        for t, s in enumerate(steps):
            if truncated[t]:
                final_values[t] = float(policy.predict_values(torch.as_tensor(s[3][None]))[0, 0])
    b = at_end.buffer
    # SB3 adds gamma * V(final observation) to a truncated step's reward in its buffer.
    bootstrapped = raw + np.float32(model.gamma) * final_values * np.array(truncated)
    assert np.allclose(b["rewards"].reshape(-1), bootstrapped, atol=1e-5)
    stats = {k.split("/", 1)[1]: float(v) for k, v in model.logger.name_to_value.items()
             if k.startswith("train/")}
    record = {
        "env": ENV_ID, "episode_steps": EPISODE_STEPS, "seed": SEED,
        "n_steps": N_STEPS, "n_epochs": N_EPOCHS, "batch_size": N_STEPS,
        "learning_rate": LEARNING_RATE, "clip_range": CLIP, "gamma": model.gamma,
        "gae_lambda": model.gae_lambda, "vf_coef": model.vf_coef, "ent_coef": model.ent_coef,
        "max_grad_norm": model.max_grad_norm,
        "obs_dim": int(b["observations"].shape[-1]), "action_dim": int(b["actions"].shape[-1]),
        "params_before": {k: floats(v) for k, v in at_end.params.items()},
        "params_after": {k: floats(v) for k, v in after.items()},
        "shapes": {k: list(v.shape) for k, v in after.items()},
        "observations": floats(b["observations"]),
        "actions": floats(b["actions"]),
        "log_probs": floats(b["log_probs"]),
        "values": floats(b["values"]),
        "rewards": floats(raw),
        "terminated": terminated,
        "truncated": truncated,
        "final_values": floats(final_values),
        "last_value": at_end.last_value,
        "advantages": floats(b["advantages"]),
        "returns": floats(b["returns"]),
        "stats": stats,
        "clip_margin": min(margins),
    }
    path = OUT / "halfcheetah_sb3_update.json"
    path.write_text(json.dumps(record) + "\n")
    print(f"wrote {path}: {stats}; nearest ratio to the clip range's edge {min(margins):.2e}")


if __name__ == "__main__":
    main()
