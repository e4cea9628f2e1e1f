"""Type stubs of Strata's native module (crates/python)."""
from os import PathLike
from typing import Callable, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

class StrataError(Exception):
    """Something Strata refused or could not do; the message says what."""

class ConfigError(StrataError):
    """A config value, key or env that is not valid; the message names it."""

class Policy:
    """A trained policy pinned to one version of one run."""

    policy_version: int
    config_hash: str
    env: str
    @property
    def obs_dim(self) -> int: ...
    @property
    def action_space(self) -> Union[Tuple[str, int], Tuple[str, List[float], List[float]]]: ...
    @property
    def config(self) -> str: ...
    def predict(
        self,
        obs: npt.ArrayLike,
        state: Optional[npt.ArrayLike] = None,
        episode_start: Optional[npt.ArrayLike] = None,
        deterministic: bool = True,
    ) -> Tuple[np.ndarray, Optional[np.ndarray]]: ...

def builtin_envs() -> List[Tuple[str, str]]: ...
def config_toml(env: Optional[str], config_json: str) -> str: ...
def train(
    env: Optional[str],
    config_json: str,
    run_dir: Optional[Union[str, PathLike[str]]] = None,
    resume: Optional[Union[str, PathLike[str]]] = None,
    progress: Optional[Callable[[str], None]] = None,
    overwrite: bool = False,
) -> Tuple[str, str]: ...
def load(
    path: Union[str, PathLike[str]], version: Optional[int] = None, best: bool = False
) -> Policy: ...
def evaluate(
    policy: Union[Policy, str, PathLike[str]],
    episodes: int = 10,
    seed: int = 12345,
    deterministic: bool = True,
) -> str: ...
def ledger_table(locations: List[str], table: str, include_invalidated: bool = True) -> bytes: ...
def ledger_report(locations: List[str]) -> str: ...
