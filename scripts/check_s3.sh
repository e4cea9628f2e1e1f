#!/usr/bin/env bash
# Runs a short training whose ledger lives in an S3-compatible store (moto's server on
# loopback), then reads it back with `strata ledger`: the local and S3 paths are the same
# code through object_store. Needs `pip install "moto[server]"`; builds with the s3 feature.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PORT:-9123}
moto_server -p "$port" >/tmp/strata-moto.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    curl -sf -X PUT "http://127.0.0.1:$port/strata-test" >/dev/null && break
    sleep 0.1
done
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true
cargo build --release -p strata-cli --features strata-ledger/s3
run=$(mktemp -d)
target/release/strata train --env cartpole --max-steps 8192 --quiet --run-dir "$run" \
    --set 'ledger.location="s3://strata-test/runs/check"'
target/release/strata ledger summary s3://strata-test/runs/check | tail -2
target/release/strata ledger metrics s3://strata-test/runs/check
rm -rf "$run"
