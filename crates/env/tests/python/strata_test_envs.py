"""Small Gymnasium envs for Strata's tests of env processes (made by factory name:
`gym:strata_test_envs:make_dict_env`, with this directory on runtime.python_path)."""
import gymnasium as gym
import numpy as np


class DictEnv(gym.Env):
    """A Dict observation (a Box, a Discrete, a MultiBinary) over a 2-d point that the
    action moves; the episode succeeds when the point leaves the unit square, and is cut
    after `limit` steps."""

    def __init__(self, limit=6):
        self.observation_space = gym.spaces.Dict({
            "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float64),
            "mode": gym.spaces.Discrete(3),
            "flags": gym.spaces.MultiBinary(2),
        })
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.limit = limit

    def _obs(self):
        return {"pos": self.pos.copy(), "mode": self.t % 3,
                "flags": np.array([self.t % 2, 1], np.int8)}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.5, 0.5, 2)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.pos = self.pos + np.asarray(action, np.float64)
        self.t += 1
        out = bool(np.abs(self.pos).max() > 1.0)
        return self._obs(), float(self.t), out, self.t >= self.limit, {"is_success": out}


def make_dict_env(**kwargs):
    return DictEnv(**kwargs)
