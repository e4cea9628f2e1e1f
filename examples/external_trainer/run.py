"""Bring your own policy: a trainer that is not Strata, agents that act with its model,
and Strata's gateway and ledger between them.

    python examples/external_trainer/run.py            # about a minute on a laptop
    strata report runs/external-trainer/gateway        # per-generation curves

What runs, in one process (plus `strata serve`, started and stopped here):

* **The trainer** is PPO's clipped objective in plain NumPy: a linear softmax policy on
  CartPole, no critic. Each generation it reads the transitions the gateway admits
  (``Client.admitted``), takes a few full-batch steps (the probability ratios start from
  the behaviour log-probabilities the agents recorded), writes the new parameters as an
  ``.npz`` artifact, publishes it as an
  external version (``Client.publish_external``: it becomes the canary candidate) and says
  which samples it trained on into that version (``Client.trained``).
* **The agents** play Gymnasium's CartPole-v1 episodes through the gateway: each episode is
  pinned to a version (the stable one, or the candidate for the canary share), whose
  artifact they fetch, check against its SHA-256 and act with; they record each action
  (``Client.record``) and report its outcome (``Client.report``).
* **The operator** compares the candidate's canary episodes with the stable ones' and
  promotes it, or rolls back when it did clearly worse. One generation the trainer ships a
  broken version on purpose (it always pushes left), so the loop shows a rollback.

The gateway's ledger then holds every step with its provenance: which version chose it,
which version trained on it, under which admission rules. ``strata report`` draws the
per-generation curves from it, with the version switches marked.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

try:
    import strata
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import strata

import gymnasium as gym

TRAINER = "numpy-reinforce@1"
OBS_DIM, ACTIONS = 4, 2


# -- the trainer's model -------------------------------------------------------------------


def logits(params: Dict[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
    return obs @ params["w"] + params["b"]


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def save_artifact(params: Dict[str, np.ndarray], path: Path) -> Dict[str, object]:
    """Writes the parameters as ``.npz`` and returns the artifact reference."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **params)
    data = path.read_bytes()
    return {"uri": path.resolve().as_uri(), "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data)}


def config_hash(params: Dict[str, np.ndarray]) -> str:
    """What produced the version: here, the trainer and the parameters' shapes."""
    shapes = {k: list(v.shape) for k, v in sorted(params.items())}
    return hashlib.sha256(json.dumps([TRAINER, shapes]).encode()).hexdigest()[:16]


class Trainer:
    """PPO's clipped objective on a linear softmax policy, without a critic: advantages are
    normalised discounted returns-to-go of whole episodes. Each generation takes
    `epochs` full-batch Adam steps from the stable version's parameters; the probability
    ratios start from the behaviour log-probabilities the agents recorded, so the steps of
    another version (a canary's) are corrected like any off-policy data."""

    def __init__(self, client: strata.Client, out: Path, seed: int, learning_rate: float,
                 epochs: int = 10, clip: float = 0.2, gamma: float = 0.99):
        self.client, self.out = client, out
        rng = np.random.default_rng(seed)
        self.params = {"w": rng.normal(0, 0.01, (OBS_DIM, ACTIONS)), "b": np.zeros(ACTIONS)}
        self.adam = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in self.params.items()}
        self.steps = 0
        self.learning_rate, self.epochs, self.clip, self.gamma = learning_rate, epochs, clip, gamma
        self.cursor: Optional[int] = None
        self.versions: Dict[int, Dict[str, np.ndarray]] = {}

    def publish(self, params: Dict[str, np.ndarray], name: str) -> int:
        artifact = save_artifact(params, self.out / f"{name}.npz")
        status = self.client.publish_external(**artifact, config_hash=config_hash(params),
                                              trainer=TRAINER, metadata={"name": name})
        self.versions[status.published] = params
        return status.published

    def read(self, base_version: int) -> List[strata.AdmittedSample]:
        """Every admitted sample not read before, page by page."""
        samples = []
        while True:
            page = self.client.admitted(self.cursor, limit=5000, learner_version=base_version)
            samples += page.samples
            self.cursor = page.next_cursor
            if not page.more:
                return samples

    def train(self, base_version: int, samples: List[strata.AdmittedSample]) -> Dict[str, np.ndarray]:
        """The new parameters, trained from `base_version`'s on `samples`; the samples'
        weights (from the admission rules) multiply their terms."""
        by_trajectory = defaultdict(list)
        for s in samples:
            by_trajectory[s.trajectory_id].append(s)
        obs, actions, returns, behaviour, weights = [], [], [], [], []
        for steps in by_trajectory.values():
            steps.sort(key=lambda s: s.step)
            g = 0.0
            for s in reversed(steps):
                g = s.reward + self.gamma * g
                returns.append(g)
            returns[len(returns) - len(steps):] = returns[len(returns) - len(steps):][::-1]
            for s in steps:
                obs.append(s.observation)
                actions.append(int(s.action))
                behaviour.append(s.behaviour_log_prob)
                weights.append(s.weight if s.weight is not None else 1.0)
        x = np.asarray(obs, dtype=np.float64)
        act = np.asarray(actions)
        adv = np.asarray(returns, dtype=np.float64)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8) * np.asarray(weights)
        old_logp = np.asarray(behaviour, dtype=np.float64)
        params = {k: v.copy() for k, v in self.versions[base_version].items()}
        onehot = np.eye(ACTIONS)[act]
        for _ in range(self.epochs):
            logp = log_softmax(logits(params, x))
            ratio = np.exp(logp[np.arange(len(act)), act] - old_logp)
            # The clipped objective's gradient flows where the ratio is not clipped.
            clipped = ((adv > 0) & (ratio > 1 + self.clip)) | ((adv < 0) & (ratio < 1 - self.clip))
            coef = np.where(clipped, 0.0, ratio * adv) / len(act)
            grad_logits = (onehot - np.exp(logp)) * coef[:, None]
            grads = {"w": x.T @ grad_logits, "b": grad_logits.sum(axis=0)}
            self.steps += 1
            for k, g in grads.items():
                m, v = self.adam[k]
                m[:] = 0.9 * m + 0.1 * g
                v[:] = 0.999 * v + 0.001 * g * g
                m_hat, v_hat = m / (1 - 0.9 ** self.steps), v / (1 - 0.999 ** self.steps)
                params[k] = params[k] + self.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)
        return params


# -- the agents ---------------------------------------------------------------------------


class Agent:
    """Plays episodes through the gateway with the model of whatever version its episode
    is pinned to."""

    def __init__(self, client: strata.Client, seed: int):
        self.client = client
        self.env = gym.make("CartPole-v1")
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.models: Dict[str, Dict[str, np.ndarray]] = {}

    def model(self, external: Dict[str, object]) -> Dict[str, np.ndarray]:
        artifact = external["artifact"]
        if artifact["sha256"] not in self.models:
            path = Path(urllib.parse.unquote(urllib.parse.urlsplit(artifact["uri"]).path))
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != artifact["sha256"] or len(data) != artifact["size"]:
                raise RuntimeError(f"artifact {artifact['uri']} does not match its checksum")
            with np.load(io.BytesIO(data)) as f:
                self.models[artifact["sha256"]] = {k: f[k] for k in f.files}
        return self.models[artifact["sha256"]]

    def play(self, episode_seed: int) -> Dict[str, object]:
        episode = self.client.start_episode()
        if episode.external is None:
            raise RuntimeError(f"episode {episode.episode_id} is pinned to Strata's own version")
        params = self.model(episode.external)
        obs, _ = self.env.reset(seed=episode_seed)
        total, step = 0.0, 0
        while True:
            logp = log_softmax(logits(params, obs[None].astype(np.float64)))[0]
            action = int(self.rng.choice(ACTIONS, p=np.exp(logp)))
            recorded = self.client.record(
                episode.episode_id, obs, action, policy_version=episode.policy_version,
                config_hash=episode.config_hash, env_seq=step, log_prob=float(logp[action]))
            obs, reward, terminated, truncated, _ = self.env.step(action)
            total += reward
            step += 1
            self.client.report(recorded.action_id, observation_after=obs, reward=float(reward),
                               terminated=terminated, truncated=truncated, env_seq=step)
            if terminated or truncated:
                return {"version": episode.policy_version, "channel": episode.channel,
                        "return": total}


# -- the gateway ---------------------------------------------------------------------------


def strata_command() -> List[str]:
    found = os.environ.get("STRATA_BIN") or shutil.which("strata")
    if found:
        return [found]
    built = Path(__file__).resolve().parents[2] / "target" / "release" / "strata"
    if built.exists():
        return [str(built)]
    raise SystemExit("no `strata` command: pip install the package, or cargo build --release")


def start_gateway(directory: Path) -> subprocess.Popen:
    """`strata serve` for CartPole with no learner of its own (the trainer is elsewhere)."""
    address = directory / "address"
    address.unlink(missing_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "serve.log", "ab") as log:
        process = subprocess.Popen(
            strata_command() + ["serve", "--env", "cartpole", "--release", "manual",
                                "--cooldown-secs", "0", "--addr", "127.0.0.1:0",
                                "--agent-tokens", "4", "--dir", str(directory)],
            stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 60
    while not (address.exists() and address.read_text().endswith("\n")):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit((directory / "serve.log").read_text())
        time.sleep(0.02)
    return process


def main(argv: Optional[List[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="runs/external-trainer",
                        help="where the gateway and the artifacts live (a new directory)")
    parser.add_argument("--replace", action="store_true",
                        help="remove --dir first if it exists (an earlier run of this example)")
    parser.add_argument("--generations", type=int, default=12)
    parser.add_argument("--episodes", type=int, default=24, help="episodes per generation")
    parser.add_argument("--canary", type=float, default=0.5,
                        help="share of episodes on the candidate")
    parser.add_argument("--broken-at", type=int, default=4,
                        help="the generation whose version is broken on purpose (0: none)")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    root = Path(args.dir)
    if root.exists() and any(root.iterdir()):
        if not args.replace:
            raise SystemExit(f"{root} exists: pass --replace to remove it, or another --dir")
        shutil.rmtree(root)
    gateway_dir = root / "gateway"
    process = start_gateway(gateway_dir)
    try:
        url = (gateway_dir / "address").read_text().strip()
        tokens = json.loads((gateway_dir / "tokens.json").read_text())
        operator = strata.Client(url, next(iter(tokens["operators"].values())))
        trainer = Trainer(strata.Client(url, next(iter(tokens["trainers"].values()))),
                          root / "artifacts", args.seed, args.learning_rate)
        agents = [Agent(strata.Client(url, token), args.seed * 100 + i)
                  for i, (_, token) in enumerate(sorted(tokens["agents"].items()))]

        # Generation 0: the trainer's initial model, made stable at once.
        stable = trainer.publish(trainer.params, "gen-0")
        operator.promote(stable, force=True)
        operator.canary(args.canary)
        candidate: Optional[int] = None
        generations, events = [], []
        episode_seed = args.seed * 1_000_000
        for gen in range(1, args.generations + 1):
            results = []
            for i in range(args.episodes):
                results.append(agents[i % len(agents)].play(episode_seed))
                episode_seed += 1
            by_version = defaultdict(list)
            for r in results:
                by_version[r["version"]].append(r["return"])
            stable_mean = float(np.mean(by_version[stable]))
            row = {"generation": gen, "episodes": len(results),
                   "mean_return": float(np.mean([r["return"] for r in results])),
                   "stable": stable, "stable_return": stable_mean}
            if candidate is not None and by_version.get(candidate):
                canary_mean = float(np.mean(by_version[candidate]))
                row.update(candidate=candidate, candidate_return=canary_mean)
                # The operator's call: promote the candidate unless its canary episodes
                # did clearly worse (a few episodes each way are noisy), then roll back.
                if canary_mean >= 0.6 * stable_mean:
                    operator.promote(candidate)
                    events.append(f"generation {gen}: promoted version {candidate} "
                                  f"(canary {canary_mean:.1f} against stable {stable_mean:.1f})")
                    stable = candidate
                else:
                    operator.rollback(stable)
                    events.append(f"generation {gen}: rolled back version {candidate} "
                                  f"(canary {canary_mean:.1f} against stable {stable_mean:.1f})")
                candidate = None
            generations.append(row)
            print(json.dumps(row), flush=True)

            # The trainer: read what is admitted, train from the stable version, publish.
            samples = trainer.read(stable)
            if not samples:
                continue
            params = trainer.train(stable, samples)
            if gen == args.broken_at:
                # A bad build, on purpose: it always pushes the cart left.
                params = {"w": np.zeros_like(params["w"]), "b": np.array([5.0, -5.0])}
            candidate = trainer.publish(params, f"gen-{gen}")
            done = trainer.client.trained(candidate, stable, [s.sample_id for s in samples])
            row["trained_on"] = done.trained
        summary = {"generations": generations, "events": events, "gateway": str(gateway_dir)}
        for e in events:
            print(e, flush=True)
        return summary
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    result = main()
    print(json.dumps({"summary": result}))
