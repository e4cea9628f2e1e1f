#!/usr/bin/env python3
"""Record reference outputs of Strata's recurrent cores from PyTorch.

An `nn.LSTM` and an `nn.GRU` (one layer, batch_first=False), every parameter set by a
formula of its index, run over a short sequence of a small batch from a given first state.
The fixture holds the parameters in PyTorch's layout, the inputs, the first state, the
outputs and the last state; `crates/nn/tests/rnn_fixtures.rs` maps the parameters to
Strata's layout and must give the same outputs. Writes `fixtures/rnn/<cell>.json`.

    pip install torch
    python3 scripts/record_rnn_fixtures.py
"""

import json
import math
import pathlib

import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "rnn"
STEPS, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def formula(shape, phase, scale):
    n = math.prod(shape)
    values = [scale * math.sin(0.613 * k + phase) for k in range(n)]
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for cell, make in (("lstm", nn.LSTM), ("gru", nn.GRU)):
        layer = make(INPUT, HIDDEN)
        params = {}
        with torch.no_grad():
            for i, (name, p) in enumerate(layer.named_parameters()):
                p.copy_(formula(tuple(p.shape), 0.9 * i, 0.5))
                params[name] = p.reshape(-1).tolist()
        xs = formula((STEPS, BATCH, INPUT), 2.1, 1.0)
        h0 = formula((1, BATCH, HIDDEN), 3.3, 0.4)
        state = (h0, formula((1, BATCH, HIDDEN), 4.7, 0.8)) if cell == "lstm" else h0
        with torch.no_grad():
            outputs, last = layer(xs, state)
        record = {
            "steps": STEPS, "batch": BATCH, "input": INPUT, "hidden": HIDDEN,
            "params": params,
            "xs": xs.reshape(-1).tolist(),
            "h0": h0.reshape(-1).tolist(),
            "outputs": outputs.reshape(-1).tolist(),
        }
        if cell == "lstm":
            record["c0"] = state[1].reshape(-1).tolist()
            record["h_n"], record["c_n"] = last[0].reshape(-1).tolist(), last[1].reshape(-1).tolist()
        else:
            record["h_n"] = last.reshape(-1).tolist()
        (OUT / f"{cell}.json").write_text(json.dumps(record) + "\n")
        print(f"wrote {OUT / (cell + '.json')}")


if __name__ == "__main__":
    main()
