"""The parity suite's table (scripts/parity.py): the verdict rule, a rerun replacing its
earlier line, and the page's text outside the markers kept."""
import argparse
import importlib.util
import json
from pathlib import Path

import pytest

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


def test_collapse_counts_runs_that_end_low_fall_and_spike(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = [line("InvertedDoublePendulum-v5", seed, system, ret, 1.0)
            for seed, system, ret in [(1, "sb3", 9000), (2, "sb3", 3000),
                                      (1, "strata", 9300), (2, "strata", 9100)]]
    results.write_text("\n".join(rows) + "\n")
    keep = tmp_path / "keep" / "InvertedDoublePendulum-v5"
    # Strata seed 1 climbs, then one update jumps (KL 1.5) and the return never comes back.
    climb = [(100.0 * u, 0.01) for u in range(1, 60)] + [(6000.0, 1.5)]
    fall = climb + [(250.0, 0.005)] * 10
    (keep / "strata").mkdir(parents=True)
    (keep / "strata" / "seed1.metrics.jsonl").write_text("\n".join(
        json.dumps({"mean_return": r, "approx_kl": k}) for r, k in [(None, 0.0), *fall]))
    # Seed 2 logs its last epoch's KL too (twice the all-epoch mean here): that one is read.
    (keep / "strata" / "seed2.metrics.jsonl").write_text("\n".join(
        json.dumps({"mean_return": r, "approx_kl": k, "approx_kl_last_epoch": 2 * k})
        for r, k in climb))
    # SB3 writes an update's KL on the next row; the first row has no training yet.
    (keep / "sb3" / "seed1.d").mkdir(parents=True)
    with (keep / "sb3" / "seed1.d" / "progress.csv").open("w") as f:
        f.write("rollout/ep_rew_mean,train/approx_kl\n50,\n")
        f.writelines(f"{100 * u},0.2\n" for u in range(1, 20))
    page = tmp_path / "page.md"
    start, end = parity.collapse_markers("InvertedDoublePendulum-v5")
    page.write_text(f"a\n{start}\n{end}\nb\n")
    args = argparse.Namespace(results=str(results), env="InvertedDoublePendulum-v5",
                              fraction=0.9, keep=str(tmp_path / "keep"), out=str(page))
    parity.collapse(args)
    text = page.read_text().splitlines()
    sb3 = next(r for r in text if r.startswith("| sb3 (1,000 steps) |"))
    strata = next(r for r in text if r.startswith("| strata (1,000 steps) |"))
    # Ceiling 9300: below 8370 ends low. SB3 seed 2 does; its kept seed 1 spikes 19 times.
    assert "| 2 | 1 | 50% | s2 3000 | 1 | 0 | 19 | 0.20 |" in sb3, sb3
    assert "| 2 | 0 | 0% |  | 2 | 1 s1 | 2 | 3.00 |" in strata, strata
    assert text[0] == "a" and text[-1] == "b"


def test_a_systems_folder_name_is_safe():
    assert parity.slug("strata env.num_envs=8 ppo.n_steps=256") == \
        "strata-env.num_envs_8-ppo.n_steps_256"
    assert parity.slug('strata env.gym.kwargs.path="a/b"') == "strata-env.gym.kwargs.path_a_b_"


def test_kl_pairs_each_systems_last_epoch_and_every_epoch(tmp_path, capsys):
    keep = tmp_path / "keep" / "Hopper-v4"
    # SB3's first row has no training yet; its row u carries update u's statistics.
    for seed, scale in [(1, 1.0), (2, 3.0), (3, 2.0)]:
        (keep / "sb3" / f"seed{seed}.d").mkdir(parents=True)
        with (keep / "sb3" / f"seed{seed}.d" / "progress.csv").open("w") as f:
            f.write("rollout/ep_rew_mean,train/approx_kl,train/approx_kl_all_epochs\n1,,\n")
            f.writelines(f"1,{0.02 * scale * u},{0.01 * scale * u}\n" for u in (1, 2, 3))
    (keep / "strata").mkdir()
    (keep / "strata" / "seed1.metrics.jsonl").write_text("\n".join(
        json.dumps({"approx_kl": 0.01 * u, "approx_kl_last_epoch": 0.03 * u})
        for u in (1, 2, 3)))
    # A run from before the last-epoch figure existed is left out, not counted as zero.
    (keep / "strata" / "seed2.metrics.jsonl").write_text(json.dumps({"approx_kl": 0.5}))
    parity.kl(argparse.Namespace(keep=str(tmp_path / "keep"), env="Hopper-v4", updates=2))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("| update | sb3 (3 runs): last epoch / every epoch | "
                      "strata (1 run): last epoch / every epoch |"), out
    assert out[2] == "| 1 | 0.0400 / 0.0200 | 0.0300 / 0.0100 |", out
    assert out[3] == "| 2 | 0.0800 / 0.0400 | 0.0600 / 0.0200 |", out


def test_kl_without_kept_runs_names_the_missing_folder(tmp_path):
    args = argparse.Namespace(keep=str(tmp_path), env="Hopper-v4", updates=2)
    with pytest.raises(SystemExit) as stop:
        parity.kl(args)
    assert "no kept runs of Hopper-v4" in str(stop.value.code)
    assert str(tmp_path / "Hopper-v4") in str(stop.value.code)
