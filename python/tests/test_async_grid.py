"""The async grid (scripts/async_grid.py): the training curve's lag-corrected step counts,
and steps to a chosen return counted from it."""
import argparse
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "async_grid.py"
spec = importlib.util.spec_from_file_location("async_grid", SCRIPT)
grid = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grid)


def test_the_curve_credits_the_collecting_policy_with_its_training(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    lines = [{"kind": "start"}]  # a line without an update is skipped
    for update, ret in enumerate([-900.0, -500.0, -150.0], start=1):
        lines.append({"update": update, "global_step": 1000 * update, "mean_return": ret,
                      "policy_lag_avg": 1.0 if update > 1 else 0.0})
    lines.append({"update": 4, "global_step": 4000, "mean_return": None})
    metrics.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    # Update 3 trained on a batch collected by version 3 - 1 - 1 = 1, which had been
    # trained on one batch: 3000 - 1000 * (1 + 1).
    assert grid.training_curve(metrics) == [[0, -900.0], [0, -500.0], [1000, -150.0]]


def test_table_counts_steps_to_a_chosen_return(tmp_path, capsys):
    results = tmp_path / "grid.jsonl"
    rows = []
    for variant, curves in {
        "sync": [[[1000, 10.0], [2000, 60.0]], [[1000, 70.0]]],
        "async L=1": [[[1000, 10.0], [3000, 50.0]], [[1000, 20.0], [2000, 30.0]]],
    }.items():
        for seed, curve in enumerate(curves, start=1):
            rows.append({"env": "e", "variant": variant, "seed": seed, "steps": 5000,
                         "steps_to_solve_trained": None, "final_greedy": 1.0,
                         "mean_lag": 0.0 if variant == "sync" else 0.5 * seed,
                         "curve": curve})
    results.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    grid.table(argparse.Namespace(results=str(results), env="e", steps=None, threshold=50.0))
    out = capsys.readouterr().out
    # sync: 2000 and 1000 -> 1.5k; async: 3000 and never (the budget, 5000) -> 4k.
    sync = next(line for line in out.splitlines() if line.startswith("| sync "))
    lagged = next(line for line in out.splitlines() if line.startswith("| async L=1 "))
    assert "| 0.00 | 2k (2, 1) | 1.00× |" in sync, sync
    # The mean policy lag over the variant's runs: (0.5 + 1.0) / 2.
    assert "| 0.75 | 4k (3, 5*) | 2.67× |" in lagged, lagged
