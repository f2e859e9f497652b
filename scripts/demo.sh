#!/usr/bin/env bash
# Fashion-MNIST end to end on a fresh machine: installs what is missing
# (scripts/setup.sh), builds (scripts/build.sh), trains the demo MLP on the real data
# with 2 worker processes, writes the weights as a PyTorch state_dict and, when
# PyTorch is installed, loads them in PyTorch and measures the test accuracy again.
# The per-epoch log (JSON lines: loss, train/test accuracy, samples/s, time waiting
# for data) goes beside the checkpoint, and scripts/plot_training.py draws it as a PNG.
#
#   scripts/demo.sh                           # 15 epochs, 2 workers: ./fashion_mlp.{pt,jsonl,png}
#   scripts/demo.sh --epochs 5 --workers 0    # extra arguments go to the trainer
#   scripts/demo.sh --out /tmp/model.pt       # /tmp/model.{pt,jsonl,png}
#   DEMO_PYTHON=1 scripts/demo.sh             # and then the same model from Python (demos/fashion_mnist.py)
#
# BUILD_DIR picks the build directory (default: build); DEMO_OUT the default --out
# (scripts/demo_images.sh sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

out=${DEMO_OUT:-fashion_mlp.pt}
log=
prev=
for a in "$@"; do
  [ "$prev" = "--out" ] && out=$a
  [ "$prev" = "--log" ] && log=$a
  case $a in --out=*) out=${a#--out=} ;; --log=*) log=${a#--log=} ;; esac
  prev=$a
done
log_args=()
if [ -z "$log" ]; then
  log=${out%.pt}.jsonl
  log_args=(--log "$log")
fi

scripts/setup.sh
BUILD_DIR="$BUILD_DIR" scripts/build.sh fashion_mnist_train
"$BUILD_DIR/demos/fashion_mnist_train" --epochs 15 --workers 2 --out "$out" "${log_args[@]}" "$@"
echo "checkpoint written to $(realpath "$out")"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 scripts/plot_training.py "$log" --out "${log%.jsonl}.png"
else
  echo "(matplotlib not found: the training log $log was not plotted; apt-get install python3-matplotlib)"
fi
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 demos/check_checkpoint.py "$out"
else
  echo "(PyTorch not found: skipped loading the checkpoint in PyTorch; see demos/check_checkpoint.py)"
fi
# DEMO_PYTHON=1: then the same model from Python, fed by loader.DataLoader (demos/fashion_mnist.py:
# 15 epochs, 2 workers; ./fashion_mlp_py.{pt,jsonl,png}).
if [ "${DEMO_PYTHON:-0}" = 1 ]; then
  BUILD_DIR="$BUILD_DIR" scripts/build.sh loader_python
  PYTHONPATH="$BUILD_DIR/python" /usr/bin/python3 demos/fashion_mnist.py --out "${out%.pt}_py.pt"
fi
