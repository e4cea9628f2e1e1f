#!/usr/bin/env python3
"""Per-call cost of predicting one observation: Strata's Policy.predict against
Stable-Baselines3's PPO.predict, for the same 4-64-64-2 CartPole policy shape, in one run.

Usage: python python/bench/predict_overhead.py [--calls 100000]
Needs: the strata wheel (pip install ./python); stable-baselines3 for the comparison
(skipped when it is not installed).
"""
import argparse
import tempfile
import timeit

import numpy as np

import strata


def per_call_us(fn, calls, repeats=5):
    """The best of `repeats` timings of `calls` calls, in microseconds per call."""
    return min(timeit.repeat(fn, number=calls, repeat=repeats)) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    obs32 = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    obs64 = obs32.astype(np.float64)
    with tempfile.TemporaryDirectory() as tmp:
        summary = strata.train("cartpole", run_dir=f"{tmp}/run", max_steps=4096, progress=False)
        policy = strata.load(summary["run_dir"])
    rows = [
        ("strata predict, float32 obs", per_call_us(lambda: policy.predict(obs32), args.calls)),
        ("strata predict, float64 obs", per_call_us(lambda: policy.predict(obs64), args.calls)),
        ("strata predict, sampled", per_call_us(lambda: policy.predict(obs32, False), args.calls)),
    ]
    try:
        import torch
        from stable_baselines3 import PPO

        torch.set_num_threads(1)
        model = PPO("MlpPolicy", "CartPole-v1", device="cpu")
        calls = max(args.calls // 20, 1000)
        sb3 = per_call_us(lambda: model.predict(obs32, deterministic=True), calls)
        rows.append(("SB3 PPO.predict (deterministic)", sb3))
    except ImportError:
        sb3 = None
    for name, us in rows:
        ratio = f"  ({sb3 / us:.0f}x faster than SB3)" if sb3 and not name.startswith("SB3") else ""
        print(f"{name:34} {us:8.2f} us/call{ratio}")


if __name__ == "__main__":
    main()
