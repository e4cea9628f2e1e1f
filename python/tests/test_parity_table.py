"""The parity suite's table (scripts/parity.py): the verdict rule, a rerun replacing its
earlier line, and the page's text outside the markers kept."""
import argparse
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "parity.py"
spec = importlib.util.spec_from_file_location("parity", SCRIPT)
parity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(parity)


def line(env, seed, system, ret, seconds):
    return json.dumps({"env": env, "seed": seed, "system": system, "steps": 1000,
                       "train_seconds": seconds, "greedy_return": ret, "returns": [ret]})


def test_the_table_applies_the_rule_and_keeps_the_page(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = []
    # SB3: mean 100, sd 10, worst 90. The variant's mean is fine, its worst seed is not.
    runs = [(100, 95, 120), (110, 105, 115), (90, 100, 62)]
    for seed, (sb3, strata, variant) in enumerate(runs, start=1):
        rows.append(line("Reacher-v5", seed, "sb3", sb3, 100.0))
        rows.append(line("Reacher-v5", seed, "strata", strata, 10.0))
        rows.append(line("Reacher-v5", seed, "strata env.num_envs=1", variant, 20.0))
    # Seed 1 of the preset done again: the later line counts.
    rows.append(line("Reacher-v5", 1, "strata", 96, 10.0))
    results.write_text("\n".join(rows) + "\n")
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{parity.RESULTS_START}\nold\n{parity.RESULTS_END}\noutro\n")
    parity.table(argparse.Namespace(results=str(results), out=str(page)))
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{parity.RESULTS_END}\noutro\n")
    assert "old" not in text
    preset = next(r for r in text.splitlines() if "generic preset" in r)
    variant = next(r for r in text.splitlines() if "env.num_envs=1" in r)
    assert "| 3 vs 3 |" in preset and "| at par |" in preset and "| 10.0× |" in preset, preset
    assert "100.3 ±" in preset, "seed 1's rerun (96) replaced its first line (95)"
    assert "| worst seed below |" in variant, variant


def test_one_sb3_seed_gives_no_verdict(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = [line("Swimmer-v5", 1, "sb3", 50, 100.0)]
    rows += [line("Swimmer-v5", seed, "strata", 40 + seed, 10.0) for seed in (1, 2, 3)]
    results.write_text("\n".join(rows) + "\n")
    page = tmp_path / "page.md"
    page.write_text(f"{parity.RESULTS_START}\n{parity.RESULTS_END}\n")
    parity.table(argparse.Namespace(results=str(results), out=str(page)))
    row = next(r for r in page.read_text().splitlines() if "Swimmer-v5" in r)
    assert "| 3 vs 1 |" in row and "| pending (one SB3 seed) |" in row, row
