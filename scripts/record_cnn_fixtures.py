#!/usr/bin/env python3
"""Record reference outputs of Strata's convolutional encoders from PyTorch.

Each encoder is built in PyTorch exactly as SB3 and CleanRL build it (NatureCNN) or as the
MinAtar reference agent does (one 16-channel 3x3 convolution, a fully connected layer of
128), every parameter set by a formula of its index in PyTorch's own layout (so the fixture
needs no weights: `crates/nn/tests/cnn_fixtures.rs` computes the same values and maps them
to Strata's layout), and run on seeded uint8 images given channels-last, as Gymnasium gives
them. Writes `fixtures/cnn/<arch>.json`.

    pip install torch numpy
    python3 scripts/record_cnn_fixtures.py
"""

import json
import math
import pathlib

import numpy as np
import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "cnn"

# arch: (convs as (out_channels, kernel, stride), features, input (height, width, channels))
# The inputs are not square, so a swapped height and width cannot pass.
ARCHS = {
    "nature_cnn": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512, (44, 36, 4)),
    "minatar_cnn": ([(16, 3, 1)], 128, (10, 9, 7)),
}
BATCH = 3


def weight(layer, index, fan_in):
    """The formula `cnn_fixtures.rs` repeats: a weight by its flat PyTorch index."""
    return math.sin(0.731 * index + 1.3 * layer) * 1.5 / math.sqrt(fan_in)


def bias(layer, index):
    return 0.05 * math.cos(1.7 * index + layer)


def build(convs, features, shape):
    height, width, channels = shape
    layers, c = [], channels
    for out, k, s in convs:
        layers += [nn.Conv2d(c, out, k, s), nn.ReLU()]
        c = out
    body = nn.Sequential(*layers, nn.Flatten())
    with torch.no_grad():
        flat = body(torch.zeros(1, channels, height, width)).shape[1]
    net = nn.Sequential(body, nn.Linear(flat, features), nn.ReLU())
    params = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        for layer, module in enumerate(params):
            w = module.weight
            fan_in = w[0].numel()
            values = [weight(layer, i, fan_in) for i in range(w.numel())]
            w.copy_(torch.tensor(values, dtype=torch.float64).reshape(w.shape))
            module.bias.copy_(torch.tensor([bias(layer, i) for i in range(module.bias.numel())]))
    return net


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for arch, (convs, features, shape) in ARCHS.items():
        net = build(convs, features, shape)
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, size=(BATCH, *shape), dtype=np.uint8)
        x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
        with torch.no_grad():
            out = net(x).numpy()
        fixture = {
            "arch": arch,
            "height": shape[0],
            "width": shape[1],
            "channels": shape[2],
            "images": images.reshape(-1).tolist(),
            "features": [round(float(v), 7) for v in out.reshape(-1)],
            "torch": torch.__version__,
        }
        path = OUT / f"{arch}.json"
        path.write_text(json.dumps(fixture) + "\n")
        print(f"{path}: {BATCH} images {shape}, {out.shape[1]} features, "
              f"{(out > 0).mean():.0%} active")


if __name__ == "__main__":
    main()
