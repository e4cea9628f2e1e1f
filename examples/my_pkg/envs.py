"""A factory env: `gym:my_pkg.envs:make_env` calls `make_env(**kwargs)` with the run's
`[env.gym.kwargs]` and trains on what it returns. Run from the repository's root:

    strata train --env gym:my_pkg.envs:make_env --set runtime.python_path=examples \
                 --set env.gym.kwargs.difficulty=3

`runtime.python_path` puts `examples/` on the env processes' `sys.path`, where this package
is found.
"""

import gymnasium as gym
import numpy as np


class Difficulty(gym.Wrapper):
    """CartPole whose pushes are weakened as `difficulty` grows (1 = CartPole-v1), and
    whose observations carry the difficulty as a fifth value."""

    def __init__(self, env, difficulty):
        super().__init__(env)
        self.difficulty = float(difficulty)
        self.env.unwrapped.force_mag = 10.0 / self.difficulty
        low = np.append(env.observation_space.low, 0.0).astype(np.float32)
        high = np.append(env.observation_space.high, np.float32(100.0)).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def _with_difficulty(self, obs):
        return np.append(obs, np.float32(self.difficulty)).astype(np.float32)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._with_difficulty(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_difficulty(obs), reward, terminated, truncated, info


def make_env(difficulty=1, **kwargs):
    """The env Strata makes, once per env, with the run's keyword arguments."""
    return Difficulty(gym.make("CartPole-v1", **kwargs), difficulty)
