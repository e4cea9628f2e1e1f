#!/usr/bin/env python3
"""Reads a run's TensorBoard scalars with TensorBoard's own reader and prints them as JSON.

Usage: read_tensorboard.py RUN_DIR/tb
Output: {"tag": [[step, value], ...], ...}, every event of every file in the directory.
Exits 3 when TensorBoard is not installed, 1 when the directory holds no scalars.
"""
import json
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed (pip install tensorboard)", file=sys.stderr)
    sys.exit(3)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    # size_guidance 0 keeps every event instead of TensorBoard's default reservoir sample.
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    if not tags:
        print(f"no scalars in {sys.argv[1]}", file=sys.stderr)
        return 1
    out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in tags}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
