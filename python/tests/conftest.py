"""Shared fixtures: the strata binary, a served gateway, gymnasium's presence."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def strata_bin() -> str:
    path = os.environ.get("STRATA_BIN") or str(REPO / "target" / "release" / "strata")
    if not Path(path).exists():
        pytest.fail(f"no strata binary at {path}: cargo build --release, or set STRATA_BIN")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`strata serve` on a fixed port in `dir`, restartable after a kill -9."""

    def __init__(self, dir: Path, env: str = "cartpole", extra=(), scheme: str = "http"):
        self.dir, self.env, self.port, self.extra = dir, env, free_port(), list(extra)
        dir.mkdir(parents=True, exist_ok=True)
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.process = None
        self.start()
        tokens = json.loads((dir / "tokens.json").read_text())
        self.operator = next(iter(tokens["operators"].values()))
        self.agents = sorted(tokens["agents"].items())
        self.trainer = next(iter(tokens.get("trainers", {}).values()), None)

    def start(self):
        address = self.dir / "address"
        address.unlink(missing_ok=True)
        log = open(self.dir / "serve.log", "ab")
        self.process = subprocess.Popen(
            [strata_bin(), "serve", "--env", self.env, "--addr", f"127.0.0.1:{self.port}",
             "--cooldown-secs", "0", "--dir", str(self.dir), *self.extra],
            stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        while not (address.exists() and address.read_text().endswith("\n")):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.process.kill()
                raise RuntimeError((self.dir / "serve.log").read_text())
            time.sleep(0.01)

    def kill9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            assert self.process.wait(timeout=30) == 0, (self.dir / "serve.log").read_text()


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path / "gateway")
    yield s
    if s.process.poll() is None:
        s.process.kill()
        s.process.wait()


@pytest.fixture
def gymnasium():
    """gymnasium in this interpreter (the pinned environment has it); skipped without it
    unless STRATA_REQUIRE_GYM is set."""
    try:
        import gymnasium as gym
    except ImportError:
        if os.environ.get("STRATA_REQUIRE_GYM"):
            pytest.fail("STRATA_REQUIRE_GYM is set but gymnasium is not installed")
        pytest.skip("gymnasium is not installed")
    return gym
