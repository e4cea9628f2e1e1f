"""PyTorch's side of `strata bench --cnn-only`: the same encoders, batches and thread
counts, timed the same way. Arguments: a JSON list of cases
`[{"arch", "convs": [[out, kernel, stride], ...], "features", "shape": [h, w, c], "batch",
"threads", "reps"}]`. Prints one JSON object: `{"rows": [{"arch", "threads", "forward_ms",
"train_ms"}]}` (medians per batch; uint8 pixels, converted inside the timed region as
SB3's preprocessing does)."""
import json
import statistics
import sys
import time

import torch
from torch import nn


def encoder(convs, features, shape):
    h, w, c = shape
    layers = []
    for out, k, s in convs:
        layers += [nn.Conv2d(c, out, k, s), nn.ReLU()]
        c = out
    body = nn.Sequential(*layers, nn.Flatten())
    with torch.no_grad():
        flat = body(torch.zeros(1, shape[2], h, w)).shape[1]
    return nn.Sequential(body, nn.Linear(flat, features), nn.ReLU())


def median_ms(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    rows = []
    for case in json.loads(sys.argv[1]):
        torch.set_num_threads(case["threads"])
        torch.manual_seed(0)
        net = encoder(case["convs"], case["features"], case["shape"])
        pixels = torch.randint(0, 256, (case["batch"], *case["shape"]), dtype=torch.uint8)

        def forward():
            with torch.no_grad():
                net(pixels.permute(0, 3, 1, 2).float() / 255.0)

        def train():
            net.zero_grad(set_to_none=False)
            net(pixels.permute(0, 3, 1, 2).float() / 255.0).sum().backward()

        rows.append({
            "arch": case["arch"],
            "threads": case["threads"],
            "forward_ms": median_ms(forward, case["reps"]),
            "train_ms": median_ms(train, case["reps"]),
        })
    print(json.dumps({"rows": rows}))


main()
