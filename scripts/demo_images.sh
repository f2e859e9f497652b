#!/usr/bin/env bash
# Fashion-MNIST from image files, end to end: installs what is missing (scripts/setup.sh),
# builds (scripts/build.sh), writes the dataset as PNG ImageFolders with
# `loader images export` (once), checks them with torchvision when it is installed
# (scripts/check_image_folders.py: class indices = labels, pixels = the IDX files'), then
# trains the demo MLP on DIR/train and tests on DIR/test through the "image_folder"
# dataset (mode L, a random horizontal flip for training), with 2 worker processes
# decoding the PNGs.  Like scripts/demo.sh it writes the weights, the per-epoch log
# (JSON lines) and its plot.
#
#   scripts/demo_images.sh                            # ./fashion_mlp_images.{pt,jsonl,png}
#   scripts/demo_images.sh --epochs 5 --workers 0     # extra arguments go to the trainer
#   scripts/demo_images.sh --augment crop             # RandomResizedCrop(28, scale=(0.8, 1)): 0.878, not 0.889
#   IMAGES_DIR=/tmp/fmnist scripts/demo_images.sh     # where the PNG folders go (default fashion_mnist_png)
#
# BUILD_DIR picks the build directory (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
IMAGES_DIR=${IMAGES_DIR:-fashion_mnist_png}

out=fashion_mlp_images.pt
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
BUILD_DIR="$BUILD_DIR" scripts/build.sh fashion_mnist_train loader_tool
if [ ! -d "$IMAGES_DIR/train" ] || [ ! -d "$IMAGES_DIR/test" ]; then
  rm -rf "$IMAGES_DIR"
  "$BUILD_DIR/loader" images export --dataset fashion-mnist --out "$IMAGES_DIR"
fi
if /usr/bin/python3 -c 'import torchvision, PIL' 2>/dev/null; then
  /usr/bin/python3 scripts/check_image_folders.py --export "$IMAGES_DIR" --every 10
else
  echo "(torchvision not found: skipped checking $IMAGES_DIR with torchvision.datasets.ImageFolder)"
fi
"$BUILD_DIR/demos/fashion_mnist_train" --image-folder "$IMAGES_DIR" --epochs 15 --workers 2 --out "$out" \
  "${log_args[@]}" "$@"
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
