#!/usr/bin/env bash
# Gateway throughput of two builds, paired: for each round, each binary serves CartPole
# (`strata serve`, a fresh directory) while `strata fleet --agents N` of the same binary
# drives it for SECONDS, alternately A then B. Prints each run's env steps per second and
# each round's ratio A/B.
#
#   scripts/fleet_pair.sh A_BIN B_BIN [ROUNDS=3] [SECONDS=60] [AGENTS=16]
#
# Compare builds on an otherwise idle machine: the figures are whole-command rates.
set -euo pipefail
a=$1 b=$2 rounds=${3:-3} seconds=${4:-60} agents=${5:-16}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Env steps per second of binary $1 under the fleet (the fleet's own report).
rate() {
    local bin=$1 dir
    dir=$(mktemp -d -p "$work")
    "$bin" serve --env cartpole --addr 127.0.0.1:0 --dir "$dir/gw" >"$dir/serve.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do
        [ -s "$dir/gw/address" ] && break
        sleep 0.1
    done
    local url
    url=$(tr -d '\n' <"$dir/gw/address")
    "$bin" fleet --server "$url" --tokens "$dir/gw/tokens.json" --agents "$agents" \
        --steps 1000000000 --seconds "$seconds" --summary-json "$dir/fleet.json" \
        >"$dir/fleet.log" 2>&1 || true
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["fleet"]; print(round(r["steps"]/r["seconds"]))' \
        "$dir/fleet.json"
}

printf '%-6s %12s %12s %8s\n' round "A steps/s" "B steps/s" "A/B"
for r in $(seq "$rounds"); do
    ra=$(rate "$a")
    rb=$(rate "$b")
    printf '%-6s %12s %12s %8.3f\n' "$r" "$ra" "$rb" "$(python3 -c "print($ra/$rb)")"
done
