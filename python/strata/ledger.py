"""The sample ledger as pyarrow tables (and pandas frames through them): every sample
with its six provenance fields, its admission decision and its invalidation; the
decisions, invalidations, duplicates and generations tables; per-generation summaries and
metrics with and without invalidated samples.

    lg = strata.ledger("runs/cp3")             # a run directory, or a ledger location
    samples = lg.samples().to_pandas()          # everything, invalidated samples included
    clean = lg.samples(invalidated=False)       # without them
    lg.metrics()["all"], lg.metrics()["valid"]  # episodes with and without invalidated samples
    fleet = strata.ledger("runs/gw1", "runs/gw2", "runs/fleet-learner")  # several, as one
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Union

from . import _strata


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
    except ImportError as e:
        raise ImportError("strata.ledger needs pyarrow: pip install pyarrow pandas") from e
    return pyarrow


class Ledger:
    """A ledger, read afresh at every call (a run that is still writing shows its newest
    durable rows)."""

    def __init__(self, *locations: str):
        if not locations:
            raise ValueError("a Ledger needs at least one location")
        self.locations = list(locations)
        # The first (the only one, for a single ledger).
        self.location = self.locations[0]

    def _table(self, name: str, invalidated: bool = True):
        pa = _pyarrow()
        data = _strata.ledger_table(self.locations, name, invalidated)
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

    def samples(self, invalidated: bool = True):
        """One row per sample: ids, policy version and config hash, issue and completion
        times, the observations seen while acting, the env's clock, the sampler's version,
        reward and flags, and what was decided (``decision``, ``weight``,
        ``rules_version``) and whether it was invalidated (``invalidation``: its reason, or
        null). ``invalidated=False`` leaves invalidated samples out."""
        return self._table("samples", invalidated)

    def decisions(self):
        """One row per admission decision (a run of consecutive samples)."""
        return self._table("decisions")

    def invalidations(self):
        """The append-only invalidation records: what, why, who, under which rules."""
        return self._table("invalidations")

    def duplicates(self):
        """Repeats of known idempotency keys (never stored as samples)."""
        return self._table("duplicates")

    def generations(self):
        """Policy versions bound to their admission-rules versions."""
        return self._table("generations")

    def _report(self) -> Dict[str, Any]:
        return json.loads(_strata.ledger_report(self.locations))

    def summary(self) -> List[Dict[str, Any]]:
        """Per bucket and generation: samples, trained, down-weighted, dropped,
        invalidated (``strata ledger summary``)."""
        return self._report()["summary"]

    def metrics(self) -> Dict[str, Any]:
        """Mean return and success rate over finished episodes, with and without those
        holding an invalidated sample (``strata ledger metrics``)."""
        return self._report()["metrics"]

    def __repr__(self) -> str:
        return "Ledger(" + ", ".join(repr(loc) for loc in self.locations) + ")"


_TABLES = ("samples", "decisions", "invalidations", "generations", "rules")


def _ledger_dir(path: Path):
    """``path`` or its ``ledger/``, if it is a ledger."""
    inner = path / "ledger"
    d = inner if inner.is_dir() else path
    return os.fspath(d) if any((d / t).exists() for t in _TABLES) else None


def ledger(*paths: Union[str, "os.PathLike[str]"]) -> Ledger:
    """The ledger of a run directory (its ``ledger/``), or at a ledger location (a
    directory or an object-store URL); given several, or a directory of them (the
    gateways and learner of a run that spans machines), all read as one."""
    if not paths:
        raise ValueError("strata.ledger needs at least one path")
    locations = []
    for path in paths:
        text = os.fspath(path)
        if "://" in text:
            locations.append(text)
            continue
        found = _ledger_dir(Path(text))
        if found is None and Path(text).is_dir():
            inside = sorted(
                d for d in (_ledger_dir(c) for c in Path(text).iterdir() if c.is_dir()) if d
            )
            if inside:
                locations.extend(inside)
                continue
        locations.append(found or text)
    return Ledger(*locations)
