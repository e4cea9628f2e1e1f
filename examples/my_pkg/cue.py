"""A task that needs memory: a cue (-1 or +1) is shown on the first step only; after
`delay` steps of waiting, the agent must answer with the action that matches it
(0 for -1, 1 for +1): +1 if right, -1 if wrong, and the episode ends. Without memory the
answer is a guess (mean return 0); with it, 1.

    strata train --env gym:my_pkg.cue:make_cue --set runtime.python_path=examples \
                 --set network.core=lstm

The observation is the cue (0 after the first step) and the steps left before the
answer, scaled to [0, 1], so the policy knows when to answer but not what.
"""

import gymnasium as gym
import numpy as np


class Cue(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, delay=4):
        self.delay = int(delay)
        if self.delay < 1:
            raise ValueError(f"delay must be at least 1, got {delay}")
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.cue = 1.0
        self.t = 0

    def _obs(self):
        shown = self.cue if self.t == 0 else 0.0
        left = (self.delay - self.t) / self.delay
        return np.array([shown, left], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue = 1.0 if self.np_random.random() < 0.5 else -1.0
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if self.t < self.delay:
            self.t += 1
            return self._obs(), 0.0, False, False, {}
        right = (int(action) == 1) == (self.cue > 0)
        return self._obs(), 1.0 if right else -1.0, True, False, {"is_success": right}


def make_cue(delay=4):
    """The factory `gym:my_pkg.cue:make_cue` calls, with `[env.gym.kwargs]`."""
    return Cue(delay=delay)
