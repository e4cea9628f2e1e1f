"""Gymnasium's own vector envs stepped as `strata bench --gym-only` steps Strata's env
processes: the same env, the same number of envs and processes, same-step autoreset, a
fixed cycle of 16 random action batches. Prints one JSON line: wall and CPU seconds (this
process and its workers, read from /proc before they exit).

Run by the strata binary (`python - ENV_ID MODE NUM_ENVS STEPS`), MODE being `sync` or
`async` (AsyncVectorEnv with shared_memory=True, one process per env).
"""
import json
import os
import resource
import sys
import time

import gymnasium as gym
import numpy as np


def process_cpu(pid):
    """User + system CPU seconds of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class NullEnv(gym.Env):
    """strata/Null-v0 as Strata's worker registers it: does nothing."""

    def __init__(self, obs_dim=4):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._obs = np.zeros(obs_dim, np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs.copy(), {}

    def step(self, action):
        return self._obs.copy(), 0.0, False, False, {}


def main():
    env_id, mode, num_envs, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    gym.register("strata/Null-v0", entry_point=NullEnv, max_episode_steps=1000)
    fns = [lambda: gym.make(env_id) for _ in range(num_envs)]
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if mode == "sync":
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=same_step)
    else:
        envs = gym.vector.AsyncVectorEnv(fns, shared_memory=True, autoreset_mode=same_step)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(16)]
    for k in range(20):  # warm-up
        envs.step(actions[k % 16])
    workers = [p.pid for p in getattr(envs, "processes", [])]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    children0 = sum(process_cpu(p) for p in workers)
    t0 = time.perf_counter()
    for k in range(steps):
        envs.step(actions[k % 16])
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    children1 = sum(process_cpu(p) for p in workers)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime) + children1 - children0
    envs.close()
    print(json.dumps({"env_steps": steps * num_envs, "wall_seconds": wall, "cpu_seconds": cpu,
                      "processes": len(workers)}))


if __name__ == "__main__":
    main()
