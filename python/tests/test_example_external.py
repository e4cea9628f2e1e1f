"""examples/external_trainer/run.py at a small size: a NumPy trainer's versions, acted
with by agents through a real `strata serve`, learn (returns per generation rise), the
broken version is rolled back, and the ledger and the report say what happened."""
import importlib.util
import json
import subprocess
from pathlib import Path

import strata
from conftest import REPO, strata_bin


def load_example():
    path = REPO / "examples" / "external_trainer" / "run.py"
    spec = importlib.util.spec_from_file_location("external_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decisions_samples(decisions):
    """The sample ids the decision records cover."""
    return [s for first, last in zip(decisions["first_sample"], decisions["last_sample"])
            for s in range(first, last + 1)]


def test_the_external_trainer_example_learns_canaries_and_rolls_back(tmp_path, gymnasium, monkeypatch):
    monkeypatch.setenv("STRATA_BIN", strata_bin())
    example = load_example()
    summary = example.main(["--dir", str(tmp_path / "run"), "--generations", "8",
                            "--episodes", "16", "--broken-at", "3", "--seed", "1"])
    rows = summary["generations"]
    assert len(rows) == 8
    first = rows[0]["mean_return"]
    last = (rows[-1]["mean_return"] + rows[-2]["mean_return"]) / 2
    assert last > 1.6 * first, f"returns did not rise: {[r['mean_return'] for r in rows]}"
    events = summary["events"]
    rolled = [e for e in events if "rolled back" in e]
    assert len(rolled) == 1 and rolled[0].startswith("generation 4:"), events
    assert sum("promoted" in e for e in events) >= 5, events

    gateway = Path(summary["gateway"])
    ledger = strata.ledger(gateway)
    samples = ledger.samples().to_pandas()
    assert (samples["bucket"] == "canary").any() and (samples["bucket"] != "canary").any()
    decisions = ledger.decisions().to_pandas()
    assert len(decisions) > 0 and set(decisions["decision"]) == {"trained"}
    # Every decision names the trainer's update: a published version after the one that
    # produced the samples' base.
    assert (decisions["update"] > decisions["learner_version"]).all()
    # The same data replayed under other rules: any sample older than its trainer's base
    # version dropped.
    rules = tmp_path / "strict.json"
    rules.write_text('{"rule": "drop", "max_age_versions": 0}')
    replay = subprocess.run([strata_bin(), "ledger", "recompute", str(gateway), "--rules",
                             str(rules), "--json"], check=True, capture_output=True, text=True,
                            timeout=120)
    recomputed = json.loads(replay.stdout)
    assert sum(r["samples"] for r in recomputed) == len(decisions_samples(decisions))
    out = tmp_path / "report"
    subprocess.run([strata_bin(), "report", str(gateway), "--out", str(out)], check=True,
                   capture_output=True, timeout=300)
    html = (out / "report.html").read_text()
    assert "per generation" in html and "version switches" in html, "curves with switch markers"
