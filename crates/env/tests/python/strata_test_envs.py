"""Small Gymnasium envs for Strata's tests of env processes (made by factory name:
`gym:strata_test_envs:make_dict_env`, with this directory on runtime.python_path)."""
import os
import time

import gymnasium as gym
import numpy as np


class DictEnv(gym.Env):
    """A Dict observation (a Box, a Discrete, a MultiBinary) over a 2-d point that the
    action moves; the episode succeeds when the point leaves the unit square, and is cut
    after `limit` steps. Actions lie within +-`bound`."""

    def __init__(self, limit=6, bound=1.0):
        self.observation_space = gym.spaces.Dict({
            "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float64),
            "mode": gym.spaces.Discrete(3),
            "flags": gym.spaces.MultiBinary(2),
        })
        self.action_space = gym.spaces.Box(-bound, bound, (2,), np.float32)
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


class PixelSideEnv(gym.Env):
    """An image task: a bright 3x3 square lies in the left or right half of a dark
    `size`x`size` picture; action 0 says left, 1 right, and a right answer earns 1. Each
    step shows a new picture; an episode is `limit` steps, so guessing earns limit / 2.

    `order` lays the picture out as "hwc" (Gymnasium's way), "chw", or "hw" (one
    channel); `stack` > 0 wraps the env in FrameStackObservation; `probe` replaces the
    picture with values that name their own position (h * 16 + w * 4 + c, mod 256), for
    checking where each lands; `dict_obs` puts the picture in a Dict beside a vector."""

    def __init__(self, size=12, channels=1, order="hwc", limit=8, probe=False,
                 dict_obs=False):
        self.size, self.channels, self.order = size, channels, order
        self.limit, self.probe, self.dict_obs = limit, probe, dict_obs
        shape = {"hwc": (size, size, channels), "chw": (channels, size, size),
                 "hw": (size, size)}[order]
        picture = gym.spaces.Box(0, 255, shape, np.uint8)
        self.observation_space = (
            gym.spaces.Dict({"picture": picture,
                             "state": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
            if dict_obs else picture)
        self.action_space = gym.spaces.Discrete(2)

    def _picture(self):
        s, c = self.size, self.channels
        if self.probe:
            h, w, k = np.meshgrid(np.arange(s), np.arange(s), np.arange(c), indexing="ij")
            hwc = ((h * 16 + w * 4 + k + self.t) % 256).astype(np.uint8)
        else:
            hwc = np.zeros((s, s, c), np.uint8)
            self.side = int(self.np_random.integers(2))
            half = s // 2
            col = int(self.np_random.integers(half - 2)) + half * self.side
            row = int(self.np_random.integers(s - 2))
            hwc[row:row + 3, col:col + 3, :] = 255
        if self.order == "chw":
            return np.ascontiguousarray(hwc.transpose(2, 0, 1))
        if self.order == "hw":
            return hwc[:, :, 0]
        return hwc

    def _obs(self):
        picture = self._picture()
        if self.dict_obs:
            return {"picture": picture, "state": np.array([0.5, -0.5], np.float32)}
        return picture

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.side = 0, 0
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.side)
        self.t += 1
        return self._obs(), reward, False, self.t >= self.limit, {}


def make_pixel_env(stack=0, **kwargs):
    env = PixelSideEnv(**kwargs)
    if stack:
        env = gym.wrappers.FrameStackObservation(env, stack)
    return env


class SlowWhenFlagged(gym.Wrapper):
    """CartPole whose steps take `delay` seconds each once the file `flag` exists: a test
    makes whatever the run does next (finishing an update, evaluating) as long as it needs,
    whatever the machine's load."""

    def __init__(self, flag, delay=0.02):
        super().__init__(gym.make("CartPole-v1"))
        self.flag = flag
        self.delay = delay

    def step(self, action):
        if os.path.exists(self.flag):
            time.sleep(self.delay)
        return self.env.step(action)


def make_slow_when_flagged(**kwargs):
    return SlowWhenFlagged(**kwargs)
