#!/usr/bin/env python3
"""Trains a preset over several seeds and prints one line per seed and a summary: the last
version's greedy return (the run's final evaluation), the best evaluated version (`best/`)
scored again on fresh greedy episodes it was not chosen on, steps and seconds to solve.

Usage: seed_table.py ENV [--seeds 1-10] [--steps N] [--strata PATH] [-- extra train args]
Example: scripts/seed_table.py mountaincar-continuous --steps 100000
         scripts/seed_table.py mountaincar-continuous -- --set network.sde=false
Run directories go to a temporary directory, removed at the end.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def seeds(text):
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env")
    parser.add_argument("--seeds", type=seeds, default=seeds("1-10"))
    parser.add_argument("--steps", type=int, default=None, help="default: the preset's")
    parser.add_argument("--fresh-episodes", type=int, default=50)
    parser.add_argument("--bar", type=float, default=90.0, help="a return counted as solved")
    parser.add_argument("--strata", default="target/release/strata")
    parser.add_argument("extra", nargs="*", help="more `strata train` arguments, after --")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            run = Path(tmp) / f"seed{seed}"
            train = [args.strata, "train", "--env", args.env, "--seed", str(seed),
                     "--run-dir", str(run), "--summary-json", str(run) + ".json",
                     "--set", "ledger.enabled=false", *args.extra]
            if args.steps:
                train += ["--max-steps", str(args.steps)]
            trained = subprocess.run(train, capture_output=True, text=True)
            if trained.returncode != 0:
                sys.exit(f"seed {seed}: strata train failed:\n{trained.stderr}")
            summary = json.loads(Path(str(run) + ".json").read_text())
            evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
            best = json.loads((run / "best" / "eval.json").read_text())
            fresh = subprocess.run(
                [args.strata, "eval", "--checkpoint", str(run / "best"), "--json",
                 "--episodes", str(args.fresh_episodes), "--seed", "777"],
                check=True, capture_output=True, text=True)
            row = {
                "seed": seed,
                "final": evals[-1]["mean_return"],
                "best_version": best["policy_version"],
                "best_fresh": json.loads(fresh.stdout)["mean_return"],
                "steps_to_solve": summary["steps_to_solve"],
                "seconds_to_solve": summary["seconds_to_solve"],
                "seconds": summary["wall_seconds"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)

    finals = [r["final"] for r in rows]
    fresh = [r["best_fresh"] for r in rows]
    solved = [r["steps_to_solve"] for r in rows if r["steps_to_solve"] is not None]
    over = lambda values: sum(v >= args.bar for v in values)  # noqa: E731
    print(f"{args.env}, {len(rows)} seeds: final >= {args.bar:g}: {over(finals)} "
          f"(mean {statistics.mean(finals):.1f}); best/ on fresh episodes >= {args.bar:g}: "
          f"{over(fresh)} (min {min(fresh):.1f}); solved in training by {len(solved)}, "
          f"median steps {statistics.median(solved) if solved else 'n/a'}")


if __name__ == "__main__":
    sys.exit(main())
