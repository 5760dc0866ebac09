#!/usr/bin/env bash
# The 2 instances x 4 devices layout under weftrun follows the 1-device losses for 100 steps (issue 7, item 6).
#   two_instances.sh TRAIN WEFTRUN OUTDIR
set -euo pipefail
train="$1"; weftrun="$2"; out="$3"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
common=(--steps 100 --train-limit 25600 --no-eval)
"$train" --devices 1 "${common[@]}" --metrics "$out/one-device.csv" >/dev/null
"$weftrun" --num-instances 2 --num-replicas 8 "$train" "${common[@]}" --metrics "$out/two-instances.csv" >/dev/null
/usr/bin/python3 "$here/compare_losses.py" "$out/one-device.csv" "$out/two-instances.csv" --rtol 1e-3 --steps 100
