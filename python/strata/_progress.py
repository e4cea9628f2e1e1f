"""Training progress, shown where Python shows things: a tqdm bar when tqdm is installed
(tqdm.auto: a widget in notebooks), else a line on stderr every few seconds."""
from __future__ import annotations

import json
import sys
import time


class Progress:
    """Receives each update's metrics line from the trainer."""

    def __init__(self, every: float = 2.0):
        self._bar = None
        self._every = every
        self._next = 0.0
        self._last = None

    def update(self, message: str) -> None:
        data = json.loads(message)
        record, total = data["record"], data["total_steps"]
        self._last = record
        ret = record.get("mean_return")
        text = f"{record['env_steps_per_sec']:.0f} steps/s, mean return " + (
            f"{ret:.1f}" if ret is not None else "-") + f", v{record['policy_version']}"
        if self._bar is None:
            try:
                from tqdm.auto import tqdm
                self._bar = tqdm(total=total, unit="step", unit_scale=True, dynamic_ncols=True)
            except ImportError:
                self._bar = False
        if self._bar:
            # update() redraws at most every mininterval; the postfix rides along.
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(record["global_step"] - self._bar.n)
        elif time.monotonic() >= self._next:
            self._next = time.monotonic() + self._every
            print(f"step {record['global_step']}/{total}: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar:
            self._bar.close()
