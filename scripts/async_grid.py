#!/usr/bin/env python3
"""Async against sync: steps to solve and final greedy return per variant, several seeds.

Each (env, variant, seed) run trains with `strata train --deterministic`, writes its summary,
then evaluates the final policy greedily over fresh episodes, and appends one JSON line to
the results file. Runs already there are skipped (`--force` reruns them), so a grid grows
cheaply. `table` prints one row per variant against the env's `sync` variant.

Steps to solve are the summary's `steps_to_solve_trained`: the env steps the first solving
policy had been trained on. Under lag the collecting policy is older than the update that
counts the crossing, so the plain count (`steps_to_solve`) would credit async with steps it
did not use.

Usage:
  async_grid.py run --env pendulum --seeds 1-5 \
      --variant sync: --variant "async L=4:--mode async --set admission.max_policy_lag=4"
  async_grid.py table --env pendulum
  async_grid.py table --env gym:InvertedDoublePendulum-v5 --threshold 9000

A variant is `LABEL:ARGS`: extra `strata train` arguments (shell words). Every run gets
`--workers W --deterministic --seed S --max-steps N` (`--workers`, default 2) and periodic
evaluations off. `--free-timing` leaves `--deterministic` out: versions are then adopted as
timing has them, as in a user's run (keep such runs in a results file of their own, with
their own `sync`). Each line records the run's mean policy lag.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EVAL_EPISODES = 20
EVAL_SEED = 555_000


def seeds(text):
    """`1-5` or `1,3,7`."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def load(results):
    if not results.exists():
        return []
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


def run_one(env, seed, steps, extra, args):
    with tempfile.TemporaryDirectory(prefix="async-grid-") as tmp:
        run_dir, summary = Path(tmp) / "run", Path(tmp) / "summary.json"
        started = time.perf_counter()
        subprocess.run(
            [args.strata, "train", "--env", env, "--seed", str(seed), "--max-steps", str(steps),
             "--workers", str(args.workers), *([] if args.free_timing else ["--deterministic"]),
             "--quiet", "--run-dir", str(run_dir),
             "--summary-json", str(summary), "--set", "report.eval_episodes=0", *extra],
            check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        s = json.loads(summary.read_text())
        out = subprocess.run(
            [args.strata, "eval", "--checkpoint", str(run_dir), "--episodes",
             str(EVAL_EPISODES), "--seed", str(EVAL_SEED + seed), "--json"],
            check=True, capture_output=True, text=True).stdout
        returns = json.loads(out)["returns"]
        lags = [json.loads(line).get("policy_lag_avg") for line in
                (run_dir / "metrics.jsonl").read_text().splitlines()]
        lags = [x for x in lags if x is not None]
        return {
            "deterministic": not args.free_timing,
            "mean_lag": round(statistics.fmean(lags), 3) if lags else None,
            "curve": training_curve(run_dir / "metrics.jsonl"),
            "seconds": round(seconds, 2),
            "steps_to_solve": s.get("steps_to_solve"),
            "steps_to_solve_trained": s.get("steps_to_solve_trained"),
            "final_greedy": statistics.fmean(returns),
        }


def training_curve(metrics):
    """Per update: `[steps the collecting policy was trained on, mean training return]`,
    so `table --threshold` can count steps to any return, not only the env's own."""
    curve = []
    for line in metrics.read_text().splitlines():
        m = json.loads(line)
        if "update" not in m or m.get("mean_return") is None:
            continue
        rollout = m["global_step"] // m["update"]
        trained = m["global_step"] - rollout * (1 + m.get("policy_lag_avg", 0.0))
        curve.append([round(trained), round(m["mean_return"], 1)])
    return curve


def run(args):
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    done = set() if args.force else {
        (r["env"], r["variant"], r["seed"], r["steps"]) for r in load(results)}
    for spec in args.variant:
        label, _, extra = spec.partition(":")
        for seed in seeds(args.seeds):
            if (args.env, label, seed, args.steps) in done:
                continue
            line = {"env": args.env, "variant": label, "args": extra, "seed": seed,
                    "steps": args.steps,
                    **run_one(args.env, seed, args.steps, shlex.split(extra), args)}
            with results.open("a") as f:
                f.write(json.dumps(line) + "\n")
            print(f"{args.env} {label} seed {seed}: solved at "
                  f"{line['steps_to_solve_trained']}, final {line['final_greedy']:.1f}",
                  flush=True)


def table(args):
    latest = {}
    for r in load(Path(args.results)):
        if r["env"] == args.env and (args.steps is None or r["steps"] == args.steps):
            latest[(r["variant"], r["seed"])] = r
    by = {}
    for (variant, _), r in sorted(latest.items(), key=lambda kv: kv[0][1]):
        by.setdefault(variant, []).append(r)
    def solved_at(r):
        if args.threshold is None:
            return r["steps_to_solve_trained"]
        return next((steps for steps, ret in r.get("curve", []) if ret >= args.threshold), None)

    # An unsolved run counts as its budget (a lower bound), marked in the per-seed list.
    def solve(r):
        at = solved_at(r)
        return at if at is not None else r["steps"]
    sync = by.get("sync")
    base = statistics.fmean(solve(r) for r in sync) if sync else None
    print("| variant | seeds | mean lag | solve, mean (per seed, k steps) | vs sync "
          "| final mean | final worst |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for variant, rs in by.items():
        mean = statistics.fmean(solve(r) for r in rs)
        per = ", ".join(
            f"{solve(r) / 1000:.0f}" + ("" if solved_at(r) is not None else "*")
            for r in rs)
        ratio = f"{mean / base:.2f}×" if base else "–"
        finals = [r["final_greedy"] for r in rs]
        lags = [r["mean_lag"] for r in rs if r.get("mean_lag") is not None]
        lag = f"{statistics.fmean(lags):.2f}" if lags else "–"
        print(f"| {variant} | {len(rs)} | {lag} | {mean / 1000:.0f}k ({per}) | {ratio} "
              f"| {statistics.fmean(finals):.0f} | {min(finals):.0f} |")
    print("\n(*: not solved within the budget; counted as the budget.)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train and evaluate; append to the results")
    r.add_argument("--seeds", default="1-5")
    r.add_argument("--variant", action="append", required=True, metavar="LABEL:ARGS")
    r.add_argument("--force", action="store_true")
    r.add_argument("--workers", type=int, default=2,
                   help="rollout workers (the env count must divide among them)")
    r.add_argument("--strata", default=str(REPO / "target/release/strata"))
    r.add_argument("--free-timing", action="store_true",
                   help="train without --deterministic (versions adopted as timing has them)")
    t = sub.add_parser("table", help="the Markdown table of one env's results")
    for p in (r, t):
        p.add_argument("--env", default="pendulum")
        p.add_argument("--results", default=str(REPO / "docs/parity/async.jsonl"))
    r.add_argument("--steps", type=int, default=200_000)
    t.add_argument("--steps", type=int)
    t.add_argument("--threshold", type=float,
                   help="count steps to this mean training return (runs that stored a curve) "
                        "instead of the env's own solve threshold")
    args = parser.parse_args()
    return run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    sys.exit(main())
