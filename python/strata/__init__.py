"""Strata from Python: train with Strata's PPO, act with trained policies, drive the
gateway deployed agents call, and read the sample ledger.

    import strata
    summary = strata.train("CartPole-v1", config={"train": {"stop_when_solved": True}})
    policy = strata.load(summary["run_dir"])
    action, _ = policy.predict(obs, deterministic=True)
    strata.evaluate(policy, episodes=20)
    strata.ledger(summary["run_dir"]).samples().to_pandas()

The work is done in Rust (``strata._strata``) with the GIL released; this package turns
Python values into Strata's config, shows progress, and holds the gateway client.
"""
from ._strata import ConfigError, Policy, StrataError, __version__
from .client import (
    Action,
    AdmittedPage,
    AdmittedSample,
    AsyncClient,
    Client,
    Episode,
    GatewayError,
    Recheck,
    Recorded,
    ReleaseStatus,
    Report,
    Trained,
)
from .ledger import Ledger, ledger
from .training import config, evaluate, load, train

__all__ = [
    "Action",
    "AdmittedPage",
    "AdmittedSample",
    "AsyncClient",
    "Client",
    "ConfigError",
    "Episode",
    "GatewayError",
    "Ledger",
    "Policy",
    "Recheck",
    "Recorded",
    "ReleaseStatus",
    "Report",
    "StrataError",
    "Trained",
    "__version__",
    "config",
    "evaluate",
    "ledger",
    "load",
    "train",
]
