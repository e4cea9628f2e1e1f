#!/usr/bin/env python3
"""Learning parity: Strata's generic preset against Stable-Baselines3's PPO defaults on
Gymnasium environments Strata has no preset for, at equal env steps.

Each (env, seed, system) run trains, then evaluates the final policy greedily over fresh
episodes, and appends one JSON line to the results file. A run already in the file is
skipped, so a subset can be rerun (`--force`) or the suite continued after a stop.
`table` turns the results into the Markdown table of docs/parity.md.

Usage:
  parity.py run [--envs ID,ID] [--seeds 1-5] [--systems strata,sb3] [--force] [--keep DIR]
  parity.py table [--out docs/parity.md]   (between the page's results markers)
  parity.py collapse --env ID [--keep DIR] [--out docs/parity.md]  (how often each system
                                            ends below 90% of the best return any run
                                            reached; between the page's markers for ID)
  parity.py kl --env ID --keep DIR [--updates 6]  (the first updates' approximate KL of
                                            each system, over the last epoch and over all)

Strata runs `strata train --env gym:ID --seed S --max-steps N` (its generic preset, the
periodic evaluations off so the wall clock is training alone), then `strata eval` over the
same fresh episodes as SB3. SB3 runs `PPO("MlpPolicy", env)` with every default (one env,
2048 steps per update, no normalisation) and one torch thread. With `--keep DIR` each run's
per-update statistics stay under DIR/ENV/SYSTEM/: Strata's metrics.jsonl, SB3's
progress.csv with two additions, the gradient norm before clipping (all parameters, the
policy's, the value network's) and the approximate KL over every epoch
(`train/approx_kl_all_epochs`). `collapse --keep DIR` reads them for falls and KL spikes,
`kl --keep DIR` for the first updates' KL taken both ways.

Needs: a Python with stable-baselines3 2.x, torch (CPU), gymnasium[mujoco] and box2d
(`--python`, default this interpreter), and a release build of strata (`--strata`).
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Environment -> env steps. Each budget is one where SB3's defaults make clear progress
# from a random policy; none of these ids has a Strata preset (the generic one applies).
SUITE = {
    "InvertedPendulum-v5": 100_000,         # MuJoCo balance
    "InvertedDoublePendulum-v5": 200_000,   # MuJoCo balance
    "Reacher-v5": 200_000,                  # MuJoCo arm
    "Swimmer-v5": 200_000,                  # MuJoCo locomotion
    "Walker2d-v5": 300_000,                 # MuJoCo locomotion
    "LunarLander-v3": 300_000,              # Box2D, discrete
    "LunarLanderContinuous-v3": 300_000,    # Box2D, continuous
    "CartPole-v0": 50_000,                  # classic control, 200-step variant
    # Widened 2026-12-05 with tasks no Strata test or suite ran. Strata's Hopper and
    # HalfCheetah presets are for the v5 ids, so the v4 ids (the same bodies and rewards
    # through the same `mujoco` bindings) take the generic preset as any env without one.
    "Hopper-v4": 300_000,                   # MuJoCo locomotion, falls end episodes
    "HalfCheetah-v4": 300_000,              # MuJoCo locomotion, never ends early
    "Ant-v5": 300_000,                      # MuJoCo locomotion, 105-dim observation
    "BipedalWalker-v3": 500_000,            # Box2D, continuous
    "Humanoid-v5": 300_000,                 # MuJoCo, 348-dim observation, 17 actions
}

EVAL_EPISODES = 20
# Where `table --out PAGE` puts the table in the page.
RESULTS_START, RESULTS_END = "<!-- results -->", "<!-- /results -->"
EVAL_SEED = 777_000


def collapse_markers(env):
    """Where `collapse --out PAGE` puts one env's table: each env has its own markers."""
    return f"<!-- collapse {env} -->", f"<!-- /collapse {env} -->"


def seeds(text):
    """`1-5` or `1,3,7`."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def done_runs(results):
    if not results.exists():
        return set()
    out = set()
    for line in results.read_text().splitlines():
        r = json.loads(line)
        out.add((r["env"], r["seed"], r["system"], r["steps"]))
    return out


def run_strata(env, seed, steps, args):
    """Trains and evaluates with the strata binary; returns (seconds, greedy returns)."""
    with tempfile.TemporaryDirectory(prefix="parity-") as tmp:
        run_dir = Path(tmp) / "run"
        child_env = dict(os.environ, STRATA_PYTHON=args.python)
        started = time.perf_counter()
        overrides = [x for kv in args.strata_set for x in ("--set", kv)]
        subprocess.run(
            [args.strata, "train", "--env", f"gym:{env}", "--seed", str(seed),
             "--max-steps", str(steps), "--run-dir", str(run_dir), "--quiet",
             "--set", "report.eval_episodes=0", *overrides],
            check=True, env=child_env, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        out = subprocess.run(
            [args.strata, "eval", "--checkpoint", str(run_dir), "--episodes",
             str(EVAL_EPISODES), "--seed", str(EVAL_SEED + seed), "--json"],
            check=True, env=child_env, capture_output=True, text=True).stdout
        if args.keep:
            # The per-update statistics, for comparing updates side by side with SB3's.
            system = "strata " + " ".join(args.strata_set)
            dest = kept_file(args.keep, env, system, seed)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes((run_dir / "metrics.jsonl").read_bytes())
        return seconds, json.loads(out)["returns"]


def slug(system):
    """A system's folder name under `--keep`: its label, spaces to `-`, anything outside
    letters, digits, `.`, `_` and `-` to `_` (`strata env.num_envs=8` -> `strata-env.num_envs_8`)."""
    return re.sub(r"[^\w.-]+", "_", "-".join(system.split())) or "strata"


def kept_file(keep, env, system, seed):
    """Where `--keep` puts one run's per-update statistics: Strata's metrics.jsonl, or the
    progress.csv of SB3's logger (in a folder of its own, as the logger writes one)."""
    folder = Path(keep) / env / slug(system)
    if system == "sb3":
        return folder / f"seed{seed}.d" / "progress.csv"
    return folder / f"seed{seed}.metrics.jsonl"


SB3_PROGRAM = r"""
import json, sys, time
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
env_id, seed, steps, episodes, eval_seed = sys.argv[1], *map(int, sys.argv[2:6])
log_csv = sys.argv[6] if len(sys.argv) > 6 else ""
torch.set_num_threads(1)
model = PPO("MlpPolicy", env_id, seed=seed, device="cpu", verbose=0)
if log_csv:
    # SB3's per-update statistics, plus the gradient norm before clipping that its
    # logger leaves out (clip_grad_norm_ returns it).
    import stable_baselines3.ppo.ppo as ppo_module
    from stable_baselines3.common.logger import configure
    pol = model.policy
    sides = {
        "policy": [*pol.mlp_extractor.policy_net.parameters(), *pol.action_net.parameters()]
                  + ([pol.log_std] if hasattr(pol, "log_std") else []),
        "value": [*pol.mlp_extractor.value_net.parameters(), *pol.value_net.parameters()],
    }
    norms, clip = {"global": [], "policy": [], "value": []}, torch.nn.utils.clip_grad_norm_
    def side_norm(params):
        return float(torch.sqrt(sum((q.grad.detach() ** 2).sum() for q in params
                                    if q.grad is not None)))
    def clip_and_keep(params, max_norm, *a, **k):
        for side, params_of_side in sides.items():
            norms[side].append(side_norm(params_of_side))
        norm = clip(params, max_norm, *a, **k)
        norms["global"].append(float(norm))
        return norm
    ppo_module.th.nn.utils.clip_grad_norm_ = clip_and_keep
    # SB3 logs as train/approx_kl the mean over the last epoch's minibatches only (its list
    # is reset each epoch); Strata's approx_kl is the mean over every epoch. The same k3
    # estimate, taken over every minibatch of every epoch, pairs the two like for like.
    # (Like for like while target_kl is unset, as in the suite: with it, SB3 evaluates the
    # minibatch that stops the update, so it is counted here, where Strata's is not.)
    batch_kls, current = [], {}
    get_batches, evaluate = model.rollout_buffer.get, pol.evaluate_actions
    def get_and_keep(*a, **k):
        for batch in get_batches(*a, **k):
            current["old_log_prob"] = batch.old_log_prob
            yield batch
    def evaluate_and_keep(*a, **k):
        values, log_prob, entropy = evaluate(*a, **k)
        with torch.no_grad():
            log_ratio = log_prob - current["old_log_prob"]
            batch_kls.append(float(torch.mean(torch.exp(log_ratio) - 1 - log_ratio)))
        return values, log_prob, entropy
    model.rollout_buffer.get, pol.evaluate_actions = get_and_keep, evaluate_and_keep
    train = model.train
    def train_and_log():
        for kept in norms.values():
            kept.clear()
        batch_kls.clear()
        train()
        model.logger.record("train/approx_kl_all_epochs", float(np.mean(batch_kls)))
        model.logger.record("train/grad_norm", float(np.mean(norms["global"])))
        model.logger.record("train/grad_norm_max", float(np.max(norms["global"])))
        model.logger.record("train/policy_grad_norm", float(np.mean(norms["policy"])))
        model.logger.record("train/value_grad_norm", float(np.mean(norms["value"])))
    model.train = train_and_log
    model.set_logger(configure(log_csv.removesuffix("/progress.csv"), ["csv"]))
started = time.perf_counter()
model.learn(total_timesteps=steps)
seconds = time.perf_counter() - started
env = gym.make(env_id)
returns = []
for k in range(episodes):
    obs, _ = env.reset(seed=eval_seed + k)
    done, total = False, 0.0
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    returns.append(total)
print(json.dumps({"seconds": seconds, "returns": returns}))
"""


def run_sb3(env, seed, steps, args):
    """Trains SB3's PPO with its defaults in a child interpreter; (seconds, returns)."""
    log = []
    if args.keep:
        log = [str(kept_file(args.keep, env, "sb3", seed))]
    out = subprocess.run(
        [args.python, "-c", SB3_PROGRAM, env, str(seed), str(steps), str(EVAL_EPISODES),
         str(EVAL_SEED + seed), *log],
        check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["seconds"], r["returns"]


def run(args):
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    done = set() if args.force else done_runs(results)
    envs = args.envs.split(",") if args.envs else list(SUITE)
    for env in envs:
        if env not in SUITE:
            sys.exit(f"unknown env {env!r}; the suite has {', '.join(SUITE)}")
    for env in envs:
        steps = args.steps or SUITE[env]
        for seed in seeds(args.seeds):
            for system in args.systems.split(","):
                runner = {"strata": run_strata, "sb3": run_sb3}[system]
                if system == "strata" and args.strata_set:
                    # A variant of the preset is a system of its own in the table.
                    system = "strata " + " ".join(args.strata_set)
                if (env, seed, system, steps) in done:
                    continue
                seconds, returns = runner(env, seed, steps, args)
                line = {"env": env, "seed": seed, "system": system, "steps": steps,
                        "train_seconds": round(seconds, 2),
                        "greedy_return": statistics.fmean(returns), "returns": returns}
                with results.open("a") as f:
                    f.write(json.dumps(line) + "\n")
                print(f"{env} seed {seed} {system}: {line['greedy_return']:.1f} "
                      f"in {seconds:.0f} s", flush=True)


def latest_runs(results):
    """The runs in the results file; a run done again (`--force`) replaces its earlier line."""
    rows = [json.loads(line) for line in Path(results).read_text().splitlines()]
    return list({(r["env"], r["seed"], r["system"], r["steps"]): r for r in rows}.values())


def table(args):
    by = {}
    for r in latest_runs(args.results):
        by.setdefault((r["env"], r["steps"]), {}).setdefault(r["system"], []).append(r)
    lines = [
        "| env | steps | Strata | seeds | SB3 mean ± sd | SB3 worst | Strata mean ± sd "
        "| Strata worst | verdict | wall SB3 / Strata |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    order = {env: i for i, env in enumerate(SUITE)}
    for (env, steps), systems in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0])):
        sb3 = systems.get("sb3", [])
        a = [r["greedy_return"] for r in sb3]
        for system, strata in sorted(systems.items()):
            if system == "sb3" or not sb3:
                continue
            b = [r["greedy_return"] for r in strata]
            sd = statistics.stdev(a) if len(a) > 1 else 0.0
            mean_ok = statistics.fmean(b) >= statistics.fmean(a) - sd
            worst_ok = min(b) >= min(a) - sd
            verdict = "at par" if mean_ok and worst_ok else (
                "mean below" if not mean_ok else "worst seed below")
            if len(a) < 2:
                # One SB3 seed has no spread to measure the margin by.
                verdict = "pending (one SB3 seed)"
            wall = statistics.median(r["train_seconds"] for r in sb3) / statistics.median(
                r["train_seconds"] for r in strata)
            sd_b = statistics.stdev(b) if len(b) > 1 else 0.0
            variant = system.removeprefix("strata").strip() or "generic preset"
            lines.append(
                f"| {env} | {steps:,} | {variant} | {len(b)} vs {len(a)} "
                f"| {statistics.fmean(a):.1f} ± {sd:.1f} | {min(a):.1f} "
                f"| {statistics.fmean(b):.1f} ± {sd_b:.1f} | {min(b):.1f} "
                f"| {verdict} | {wall:.1f}× |")
    write_between(args.out, "\n".join(lines) + "\n", RESULTS_START, RESULTS_END)


def kept_updates(keep, env, system, seed):
    """(training return, approx KL over the update's last epoch) per update of a run kept
    by `--keep`, or None; updates before the first finished episode (no return yet) are
    left out. SB3's logger writes an update's training statistics on the next update's
    row (it logs before training), so each KL is paired here with the row before; its
    last update is never written, so an SB3 run has one update fewer than Strata's."""
    path = kept_file(keep, env, system, seed)
    if not path.exists():
        return None
    if system == "sb3":
        rows = list(csv.DictReader(path.open()))
        pairs = [(before.get("rollout/ep_rew_mean"), row.get("train/approx_kl"))
                 for before, row in zip(rows, rows[1:])]
        return [(float(ret), float(kl)) for ret, kl in pairs if ret and kl]
    # SB3's figure is its last epoch's mean; Strata's runs log that one too since
    # 2026-12-06 (older runs only the every-epoch mean, a little lower, taken in its stead).
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["mean_return"], r.get("approx_kl_last_epoch", r["approx_kl"]))
            for r in rows if r.get("mean_return") is not None]


def collapsed(updates):
    """A run collapsed when its training return over its last five updates is back within
    a tenth of the way from where it started to its best (a fall it never climbed back
    from; sampled returns swing too much for a smaller fall to tell)."""
    returns = [r for r, _ in updates]
    first, best = returns[0], max(returns)
    last = statistics.fmean(returns[-5:])
    return last < first + 0.1 * (best - first)


def collapse(args):
    runs = [r for r in latest_runs(args.results) if r["env"] == args.env]
    if not runs:
        sys.exit(f"no runs of {args.env} in {args.results}")
    ceiling = max(r["greedy_return"] for r in runs)
    bar = args.fraction * ceiling
    lines = [
        f"{args.env}: ceiling {ceiling:.1f} (the best greedy return of any run), a run "
        f"ends low below {bar:.1f} ({args.fraction:.0%})\n",
        "| system | seeds | ended low | rate | their greedy returns | runs kept | collapsed "
        "| updates with KL > 0.1 | largest KL |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    by = {}
    for r in runs:
        by.setdefault((r["system"], r["steps"]), []).append(r)
    for (system, steps), group in sorted(by.items()):
        group.sort(key=lambda r: r["seed"])
        low = [r for r in group if r["greedy_return"] < bar]
        kept = [(r["seed"], kept_updates(args.keep, args.env, system, r["seed"]))
                for r in group] if args.keep else []
        kept = [(seed, u) for seed, u in kept if u]
        fell = [f"s{seed}" for seed, u in kept if collapsed(u)]
        spikes = sum(k > 0.1 for _, u in kept for _, k in u)
        largest = max((k for _, u in kept for _, k in u), default=None)
        fell_text = " ".join([str(len(fell)), *fell])
        kept_text = (f"{len(kept)} | {fell_text} | {spikes} | {largest:.2f}"
                     if kept else "0 | - | - | -")
        label = system if steps == SUITE.get(args.env) else f"{system} ({steps:,} steps)"
        lines.append(f"| {label} | {len(group)} | {len(low)} | {len(low) / len(group):.0%} | "
                     + ", ".join(f"s{r['seed']} {r['greedy_return']:.0f}" for r in low)
                     + f" | {kept_text} |")
    write_between(args.out, "\n".join(lines) + "\n", *collapse_markers(args.env))


def early_kls(folder, updates):
    """Per kept run in a system's folder: the approximate KL of its first `updates`
    updates, as (last epoch's mean, every epoch's mean) pairs. SB3 logs both on the row
    after the update (its logger dumps before training, so row 0 has neither): the first
    as `train/approx_kl`, the second as `train/approx_kl_all_epochs` (parity.py's
    addition). Strata's metrics carry `approx_kl_last_epoch` and `approx_kl`."""
    runs = []
    for path in sorted(folder.glob("seed*.d/progress.csv")):
        rows = list(csv.DictReader(path.open()))[1:updates + 1]
        runs.append([(float(r["train/approx_kl"]), float(r["train/approx_kl_all_epochs"]))
                     for r in rows if r.get("train/approx_kl_all_epochs")])
    for path in sorted(folder.glob("seed*.metrics.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()][:updates]
        runs.append([(r["approx_kl_last_epoch"], r["approx_kl"])
                     for r in rows if "approx_kl_last_epoch" in r])
    return [run for run in runs if len(run) == updates]


def kl(args):
    """The first updates' approximate KL, each system's median over its kept runs, taken
    both ways: over the last epoch (what SB3 logs) and over every epoch (what Strata logs)."""
    base = Path(args.keep) / args.env
    if not base.is_dir():
        sys.exit(f"no kept runs of {args.env}: {base} is not a folder (see `run --keep`)")
    systems = {f.name: early_kls(f, args.updates) for f in sorted(base.iterdir()) if f.is_dir()}
    systems = {name: runs for name, runs in systems.items() if runs}
    if not systems:
        sys.exit(f"no kept runs under {base} with both KL figures for {args.updates} updates")
    head = " | ".join(f"{name} ({len(runs)} run{'s' * (len(runs) != 1)}): "
                      "last epoch / every epoch"
                      for name, runs in systems.items())
    lines = [f"| update | {head} |", "|---:|" + "---|" * len(systems)]
    for u in range(args.updates):
        cells = [f"{statistics.median(r[u][0] for r in runs):.4f} / "
                 f"{statistics.median(r[u][1] for r in runs):.4f}" for runs in systems.values()]
        lines.append(f"| {u + 1} | " + " | ".join(cells) + " |")
    print("\n".join(lines))


def write_between(out, text, start_marker, end_marker):
    """Prints `text`, or puts it into the page `out` between its markers."""
    if out == "-":
        print(text, end="")
        return
    page = Path(out).read_text()
    start, end = page.index(start_marker), page.index(end_marker)
    Path(out).write_text(page[:start + len(start_marker)] + "\n" + text + page[end:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train and evaluate; append to the results")
    r.add_argument("--envs", help="comma-separated ids (default: the whole suite)")
    r.add_argument("--seeds", default="1-5")
    r.add_argument("--systems", default="strata,sb3")
    r.add_argument("--steps", type=int, help="override every env's budget")
    r.add_argument("--force", action="store_true", help="rerun runs already in the results")
    r.add_argument("--strata-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for Strata (a variant, labelled by it)")
    r.add_argument("--python", default=sys.executable)
    r.add_argument("--strata", default=str(REPO / "target/release/strata"))
    r.add_argument("--keep", metavar="DIR",
                   help="keep each run's per-update statistics under DIR (Strata's "
                        "metrics.jsonl, SB3's progress.csv with the gradient norm)")
    t = sub.add_parser("table", help="the Markdown table of the results")
    t.add_argument("--out", default="-", help="a page with results markers, or - (stdout)")
    c = sub.add_parser("collapse", help="how often each system's runs end low")
    c.add_argument("--env", required=True)
    c.add_argument("--fraction", type=float, default=0.9,
                   help="a run ends low below this fraction of the best return")
    c.add_argument("--keep", metavar="DIR", help="runs kept by `run --keep`: count KL spikes")
    c.add_argument("--out", default="-", help="a page with collapse markers, or - (stdout)")
    k = sub.add_parser("kl", help="the first updates' KL, last epoch and every epoch")
    k.add_argument("--env", required=True)
    k.add_argument("--keep", metavar="DIR", required=True, help="runs kept by `run --keep`")
    k.add_argument("--updates", type=int, default=6)
    for p in (r, t, c):
        p.add_argument("--results", default=str(REPO / "docs/parity/results.jsonl"))
    args = parser.parse_args()
    return {"run": run, "table": table, "collapse": collapse, "kl": kl}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
