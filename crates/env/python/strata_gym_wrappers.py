"""Strata's named Gymnasium wrappers (`env.gym.wrappers` in a run's config), applied in the
env processes; part of the worker program (crates/env/src/gym/process.rs puts this source
before strata_gym_worker.py's).

`atari` is CleanRL's `ppo_atari` preprocessing on an ALE env made with `frameskip=1`:
Gymnasium's `AtariPreprocessing` (up to 30 no-op actions at reset, each action repeated 4
frames with the last two max-pooled, 84x84 grey), then an episode per life (the game goes
on after a life is lost; only a seeded reset starts a new game), FIRE after every reset
where the game has it, rewards clipped to their sign, 4 frames stacked. The episodes Strata
trains on are lives; the episodes it reports are whole games with their raw score
(`GameScore` and `GameLength` put them in `info["strata_game"]`).
"""


def wrapper_names():
    """The names `env.gym.wrappers` takes, for errors."""
    return sorted(WRAPPERS)


def reports_games(names):
    """Whether the named wrappers report whole games (`info["strata_game"]`) apart from
    the episodes Strata trains on."""
    return any(name in GAME_WRAPPERS for name in names)


def apply_wrappers(gym, np, env, names):
    """`env` wrapped by each named stack in turn."""
    for name in names:
        if name not in WRAPPERS:
            raise ValueError(f"unknown wrapper {name!r} in env.gym.wrappers (known: "
                             f"{', '.join(wrapper_names())})")
        env = WRAPPERS[name](gym, np, env)
    return env


def atari(gym, np, env):
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    inner = env.unwrapped
    if not hasattr(inner, "ale"):
        raise ValueError(f"the `atari` wrapper needs an ALE env (gym:ALE/Breakout-v5, ...); "
                         f"{env.spec.id if env.spec else env} is not one")

    class GameScore(gym.Wrapper):
        """Innermost: the raw score of the game so far, and whether the game (not a life)
        ended, in every step's info."""

        def reset(self, **kwargs):
            self.score = 0.0
            return self.env.reset(**kwargs)

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.score += float(reward)
            info["game_score"] = self.score
            info["game_over"] = bool(terminated or truncated)
            return obs, reward, terminated, truncated, info

    class EpisodePerLife(gym.Wrapper):
        """A lost life ends the episode (terminated) while the game goes on: the next
        unseeded reset only steps a no-op. A seeded reset, or one after the game ended,
        starts a new game."""

        def __init__(self, env):
            super().__init__(env)
            self.lives, self.game_over = 0, True

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.game_over = bool(terminated or truncated)
            lives = inner.ale.lives()
            if 0 < lives < self.lives:
                terminated = True
            self.lives = lives
            return obs, reward, terminated, truncated, info

        def reset(self, seed=None, options=None):
            if self.game_over or seed is not None or options is not None:
                obs, info = self.env.reset(seed=seed, options=options)
            else:
                obs, _, terminated, truncated, info = self.env.step(0)
                if terminated or truncated:
                    obs, info = self.env.reset()
            self.game_over = False
            self.lives = inner.ale.lives()
            return obs, info

    class FireReset(gym.Wrapper):
        """Presses FIRE after a reset (the games that wait for it to serve)."""

        def reset(self, **kwargs):
            self.env.reset(**kwargs)
            obs, _, terminated, truncated, info = self.env.step(1)
            if terminated or truncated:
                obs, info = self.env.reset()
            return obs, info

    class ClipReward(gym.RewardWrapper):
        def reward(self, reward):
            return float(np.sign(reward))

    class GameLength(gym.Wrapper):
        """Outermost: counts a game's steps across its lives and reports the game when it
        ends (`info["strata_game"]`: raw score, steps)."""

        def reset(self, seed=None, options=None):
            if seed is not None or options is not None:
                self.steps = 0
            return self.env.reset(seed=seed, options=options)

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.steps = getattr(self, "steps", 0) + 1
            if info.get("game_over"):
                info["strata_game"] = (info["game_score"], self.steps)
                self.steps = 0
            return obs, reward, terminated, truncated, info

    env = AtariPreprocessing(GameScore(env), noop_max=30, frame_skip=4, screen_size=84,
                             terminal_on_life_loss=False, grayscale_obs=True)
    env = EpisodePerLife(env)
    if "FIRE" in inner.get_action_meanings():
        env = FireReset(env)
    env = ClipReward(env)
    env = FrameStackObservation(env, 4)
    return GameLength(env)


WRAPPERS = {"atari": atari}
GAME_WRAPPERS = {"atari"}
