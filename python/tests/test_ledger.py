"""strata.ledger: the run's samples, decisions, invalidations and generations as pyarrow
tables and pandas frames, with and without invalidated samples."""
import subprocess

import pyarrow as pa

import strata
from conftest import strata_bin


def test_a_runs_ledger_reads_into_pandas_with_and_without_invalidated_samples(tmp_path):
    run = tmp_path / "run"
    summary = strata.train("cartpole", run_dir=run, max_steps=2048, progress=False)
    lg = strata.ledger(run)
    samples = lg.samples()
    assert isinstance(samples, pa.Table) and samples.num_rows == summary["total_steps"]
    frame = samples.to_pandas()
    for column in ("policy_version", "config_hash", "issued_at", "completed_at", "obs_count",
                   "env_clock", "sampler_version", "newer_policy_sampling", "decision",
                   "invalidation"):
        assert column in frame.columns, column
    assert (frame["config_hash"] == summary["config_hash"]).all()
    assert frame["decision"].notna().all() and frame["invalidation"].isna().all()
    assert lg.decisions().num_rows > 0 and lg.generations().num_rows > 0
    assert lg.invalidations().num_rows == 0 and lg.duplicates().num_rows == 0
    # An operator invalidates one trajectory (the CLI, as an operator would).
    trajectory = int(frame["trajectory_id"].iloc[100])
    subprocess.run([strata_bin(), "ledger", "invalidate", str(run), "--trajectory",
                    str(trajectory), "--reason", "human_interrupt", "--text", "door opened",
                    "--author", "operator:test"], check=True, capture_output=True)
    after = lg.samples().to_pandas()
    hit = after["trajectory_id"] == trajectory
    assert (after.loc[hit, "invalidation"] == "human_interrupt").all()
    valid = lg.samples(invalidated=False).to_pandas()
    assert len(valid) == len(after) - hit.sum() and trajectory not in set(valid["trajectory_id"])
    invalidations = lg.invalidations().to_pandas()
    assert len(invalidations) == 1 and invalidations["author"][0] == "operator:test"
    metrics = lg.metrics()
    assert metrics["all"]["episodes"] >= metrics["valid"]["episodes"]
    assert sum(g["invalidated"].get("human_interrupt", 0) for g in lg.summary()) == hit.sum()


def test_an_unknown_table_or_location_is_named(tmp_path):
    import pytest
    with pytest.raises(ValueError, match="unknown ledger table"):
        strata._strata.ledger_table([str(tmp_path)], "nope", True)
    empty = strata.ledger(tmp_path / "empty").samples()
    assert empty.num_rows == 0 and "sample_id" in empty.column_names


def test_several_ledgers_read_as_one_and_overlapping_ones_are_refused(tmp_path):
    import pytest
    runs = tmp_path / "runs"
    a = runs / "a"
    strata.train("cartpole", run_dir=a, max_steps=1024, progress=False)
    # A directory of ledgers reads as their union: here, the one run it holds.
    assert strata.ledger(runs).samples().num_rows == strata.ledger(a).samples().num_rows
    assert strata.ledger(a, a / "ledger").locations == [str(a / "ledger")] * 2
    # Two training runs both number their samples from 0: not the ledgers of one run's
    # gateways, and refused as such rather than counted twice.
    strata.train("cartpole", run_dir=runs / "b", max_steps=1024, progress=False)
    with pytest.raises(Exception, match="not ledgers of one run"):
        strata.ledger(runs).summary()
