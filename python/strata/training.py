"""Training, loading and evaluating policies: the Python face of ``strata train`` and
``strata eval``."""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Mapping, Optional, Union

from . import _strata
from ._progress import Progress

PathLike = Union[str, "os.PathLike[str]"]

# What turns an optional key off (Python's None), as Strata's config files write it.
_NONE = "none"


def env_name(env: str) -> str:
    """Strata's name for `env`: a built-in name as it is, a Gymnasium id that a built-in
    env reproduces as that env (``CartPole-v1`` is ``cartpole``: the same dynamics, in
    Rust), ``gym:...`` as it is, and any other Gymnasium id as ``gym:ID`` (run in Python
    worker processes)."""
    if env.startswith("gym:"):
        return env
    builtins = dict(_strata.builtin_envs())
    if env in builtins:
        return env
    for name, gymnasium_id in builtins.items():
        if gymnasium_id == env:
            return name
    return "gym:" + env


def _tables(config: Optional[Mapping[str, Any]]) -> dict:
    """Config sections as nested tables: ``{"ppo": {"n_epochs": 10}}`` and
    ``{"ppo.n_epochs": 10}`` both work; None turns an optional key off."""
    out: dict = {}

    def put(path, value):
        table = out
        for part in path[:-1]:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise _strata.ConfigError(f"`{'.'.join(path)}`: `{part}` is a key, not a section")
        table[path[-1]] = _NONE if value is None else value

    def walk(prefix, mapping):
        for key, value in mapping.items():
            path = prefix + str(key).split(".")
            if isinstance(value, Mapping) and path[-1] != "kwargs":
                walk(path, value)
            else:
                put(path, dict(value) if isinstance(value, Mapping) else value)

    walk([], config or {})
    return out


def _request(env: Optional[str], config: Optional[Mapping[str, Any]], shortcuts: dict) -> tuple:
    tables = _tables(config)
    for dotted, value in shortcuts.items():
        if value is not None:
            section, key = dotted.split(".")
            tables.setdefault(section, {})[key] = value
    name = env_name(env) if env is not None else None
    # Gymnasium envs run in this interpreter's environment unless the config says otherwise.
    if name is not None and name.startswith("gym:"):
        tables.setdefault("runtime", {}).setdefault("python", sys.executable)
    return name, json.dumps(tables)


def config(env: Optional[str] = None, config: Optional[Mapping[str, Any]] = None) -> str:
    """The effective config of `env` with `config` laid over its preset, as TOML (what
    ``strata config show`` prints)."""
    name, text = _request(env, config, {})
    return _strata.config_toml(name, text)


def train(
    env: Optional[str] = None,
    config: Optional[Mapping[str, Any]] = None,
    run_dir: Optional[PathLike] = None,
    *,
    seed: Optional[int] = None,
    max_steps: Optional[int] = None,
    stop_when_solved: Optional[bool] = None,
    deterministic: Optional[bool] = None,
    resume: Optional[PathLike] = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict:
    """Trains `env` with PPO and returns the run's summary (steps, seconds, mean return,
    whether and when it was solved, the time breakdown, and ``run_dir``).

    `env` is a built-in env (``"cartpole"``), a Gymnasium id (``"CartPole-v1"``, run by
    its built-in twin; ``"HalfCheetah-v5"``, run in worker processes of this Python) or a
    factory (``"gym:my_pkg.envs:make_env"``). `config` holds any keys of Strata's config
    over the env's preset, nested (``{"ppo": {"n_epochs": 10}}``) or dotted
    (``{"ppo.n_epochs": 10}``); None turns an optional key off. The run directory gets
    the config, metrics, evaluations, checkpoints and the sample ledger (default
    ``runs/<env>-seed<seed>-<time>``). `resume` continues a checkpoint, or a run
    directory's newest one, exactly where it stopped (in that run directory unless
    `run_dir` says otherwise); `config` may then change run-control keys only. A run
    directory that already holds a run is refused unless `resume` continues it, or
    `overwrite` moves it aside (renamed to ``<run_dir>.replaced-<time>``, never deleted).

    Progress shows in the terminal and in notebooks (with tqdm when it is installed).
    Ctrl-C stops the run at its next wait: the checkpoint is written and the env
    processes stopped, then ``KeyboardInterrupt`` is raised.

    Raises ConfigError for a bad key, value or env, StrataError when training fails.
    """
    if resume is not None and env is not None:
        raise _strata.ConfigError("resume takes the env and config from the checkpoint; drop env")
    name, text = _request(env, config, {
        "train.seed": seed,
        "train.total_steps": max_steps,
        "train.stop_when_solved": stop_when_solved,
        "train.deterministic": deterministic,
    })
    reporter = Progress() if progress else None
    try:
        summary, root = _strata.train(
            name,
            text,
            os.fspath(run_dir) if run_dir is not None else None,
            os.fspath(resume) if resume is not None else None,
            reporter.update if reporter else None,
            overwrite,
        )
    finally:
        if reporter:
            reporter.close()
    result = json.loads(summary)
    result["run_dir"] = os.fspath(root)
    return result


def load(
    path: PathLike, version: Optional[int] = None, best: bool = False
) -> "_strata.Policy":
    """A policy of a checkpoint or run directory. By default a run directory's final
    checkpoint (the last version trained); `best=True` its `best/` (the version with the
    best evaluation, the one to deploy); `version=N` the run's checkpoint holding version N.
    The loaded policy's `policy_version` says which it is."""
    return _strata.load(os.fspath(path), version, best)


def evaluate(
    policy: Union["_strata.Policy", PathLike],
    episodes: int = 10,
    seed: int = 12345,
    deterministic: bool = True,
) -> dict:
    """Runs `episodes` fresh episodes seeded by `seed` with `policy` (a loaded policy or
    a checkpoint path): mean and std of the returns, every return, the mean length and,
    for tasks that define success, the success rate."""
    if not isinstance(policy, _strata.Policy):
        policy = os.fspath(policy)
    return json.loads(_strata.evaluate(policy, episodes, seed, deterministic))
