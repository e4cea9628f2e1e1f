#!/usr/bin/env python3
"""Fingerprints deterministic training runs, to show a refactor changed no behaviour.

Trains a few small deterministic configurations (sync and async collection, central
inference, gSDE, normalisation) with the `strata` binary given, then prints one SHA-256 per
run over everything a run decides: the final and best weights, the ledger's samples,
decisions and generations (wall-clock columns dropped) and the evaluation returns. Run it
on two builds and compare the lines. Sample columns added since the first fingerprints
(`ADDED_COLUMNS`) are left out, so builds before and after them still compare.

    scripts/determinism_fingerprint.py target/release/strata
"""
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

RUNS = {
    "cartpole-sync": ["--env", "cartpole", "--max-steps", "20000"],
    "cartpole-async-2w": ["--env", "cartpole", "--max-steps", "20000",
                          "--workers", "2", "--mode", "async"],
    "pendulum-central": ["--env", "pendulum", "--max-steps", "12000", "--workers", "2",
                         "--set", "runtime.inference=\"central\""],
    "mcc-gsde-episode": ["--env", "mountaincar-continuous", "--max-steps", "12000",
                         "--set", "network.sde_hold=\"episode\""],
    "acrobot-norm": ["--env", "acrobot", "--max-steps", "8000",
                     "--set", "env.normalize_obs=true", "--set", "env.normalize_reward=true"],
}


# Columns a newer ledger has and an older one lacks (absent ones read as null there).
ADDED_COLUMNS = ("worker", "fragment")


def table_digest(path: Path, order: list[str]) -> bytes:
    if not path.exists():
        return b"absent"
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    keep = [f.name for f in table.schema if not pa.types.is_timestamp(f.type)
            and f.name not in ("age_seconds", *ADDED_COLUMNS)]
    table = table.select(keep).sort_by([(c, "ascending") for c in order])
    return hashlib.sha256(json.dumps(table.to_pylist(), sort_keys=True).encode()).digest()


def fingerprint(strata: str, name: str, args: list[str], root: Path) -> str:
    run_dir = root / name
    subprocess.run([strata, "train", *args, "--seed", "5", "--deterministic", "--quiet",
                    "--run-dir", str(run_dir)], check=True, stdout=subprocess.DEVNULL)
    digest = hashlib.sha256()
    for part in ("checkpoint/model.safetensors", "best/model.safetensors"):
        digest.update((run_dir / part).read_bytes())
    ledger = run_dir / "ledger"
    digest.update(table_digest(ledger / "samples", ["sample_id"]))
    digest.update(table_digest(ledger / "decisions", ["first_sample", "update"]))
    digest.update(table_digest(ledger / "generations", ["policy_version", "operation"]))
    for line in (run_dir / "eval.jsonl").read_text().splitlines():
        record = json.loads(line)
        digest.update(json.dumps([record.get("policy_version"), record.get("returns")]).encode())
    return digest.hexdigest()[:16]


def main() -> None:
    strata = sys.argv[1] if len(sys.argv) > 1 else "target/release/strata"
    with tempfile.TemporaryDirectory() as root:
        for name, args in RUNS.items():
            print(f"{name:20} {fingerprint(strata, name, args, Path(root))}", flush=True)


if __name__ == "__main__":
    main()
