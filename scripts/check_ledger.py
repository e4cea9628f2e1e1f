#!/usr/bin/env python3
"""Reads a Strata ledger with independent readers (pyarrow, and DuckDB when installed) and
checks it: every sample has the six provenance fields, ids are unique, partitions match the
rows, decisions and invalidations reference stored samples.

Usage: check_ledger.py LEDGER_DIR [--expect-samples N]
Prints one JSON object with what it found; exits non-zero on the first failed check.
"""
import json
import sys
from pathlib import Path

import pyarrow.dataset as ds


def fail(message):
    print(f"check_ledger: {message}", file=sys.stderr)
    sys.exit(1)


def table(root, name):
    path = root / name
    if not path.exists():
        return None
    return ds.dataset(str(path), format="parquet", partitioning="hive").to_table()


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: check_ledger.py LEDGER_DIR [--expect-samples N]")
    root = Path(args[0])
    expect = int(args[args.index("--expect-samples") + 1]) if "--expect-samples" in args else None

    samples = table(root, "samples")
    if samples is None:
        fail(f"{root}: no samples table")
    rows = samples.num_rows
    if expect is not None and rows != expect:
        fail(f"{rows} samples, expected {expect}")
    required = [
        "sample_id", "episode_id", "trajectory_id", "step",
        "policy_version", "config_hash",            # (1)
        "issued_at", "completed_at",                # (2)
        "obs_count", "obs_hash", "obs_min", "obs_max", "obs_mean",  # (3)
        "env_clock",                                # (4)
        "sampler_version", "newer_policy_sampling", # (5)
        "bucket", "versions",                       # hive partitions (versions=first-last)
    ]
    for name in required:
        if name not in samples.column_names:
            fail(f"samples lack column {name}")
        if samples.column(name).null_count:
            fail(f"samples column {name} has {samples.column(name).null_count} nulls")
    # Nanosecond timestamps as integers (datetime has only microseconds).
    for name in ("issued_at", "completed_at"):
        i = samples.column_names.index(name)
        samples = samples.set_column(i, name, samples.column(name).cast("int64"))
    data = samples.to_pydict()
    if len(set(data["sample_id"])) != rows:
        fail("sample ids are not unique")
    for i in range(rows):
        first, last = (int(v) for v in str(data["versions"][i]).split("-"))
        if not first <= data["policy_version"][i] <= last:
            fail(f"sample {data['sample_id'][i]} of version {data['policy_version'][i]} stored under versions={first}-{last}")
        if data["completed_at"][i] < data["issued_at"][i]:
            fail(f"sample {data['sample_id'][i]} completed before it was issued")
        if data["newer_policy_sampling"][i] != (data["sampler_version"][i] > data["policy_version"][i]):
            fail(f"sample {data['sample_id'][i]}: newer_policy_sampling disagrees with sampler_version")
        if not (len(data["obs_min"][i]) == len(data["obs_max"][i]) == len(data["obs_mean"][i]) > 0):
            fail(f"sample {data['sample_id'][i]}: observation summary widths differ")

    ids = set(data["sample_id"])
    decisions = table(root, "decisions")
    decided = 0
    if decisions is not None:
        d = decisions.select(["first_sample", "last_sample"]).to_pydict()
        for first, last in zip(d["first_sample"], d["last_sample"]):
            if first not in ids or last not in ids:
                fail(f"decision for samples {first}..={last} references samples not stored")
            decided += last - first + 1
    invalidations = table(root, "invalidations")
    found = {
        "samples": rows,
        "decided": decided,
        "invalidations": 0 if invalidations is None else invalidations.num_rows,
        "generations": len(set(data["policy_version"])),
    }

    try:
        import duckdb
    except ImportError:
        duckdb = None
    if duckdb is not None:
        glob = str(root / "samples" / "**" / "*.parquet")
        con = duckdb.connect()
        count, = con.execute(
            f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = true)"
        ).fetchone()
        if count != rows:
            fail(f"DuckDB counts {count} samples, pyarrow {rows}")
        found["duckdb_samples"] = count
    print(json.dumps(found))


if __name__ == "__main__":
    main()
