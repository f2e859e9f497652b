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

scripts/setup.sh
BUILD_DIR="$BUILD_DIR" scripts/build.sh loader_tool
if [ ! -d "$IMAGES_DIR/train" ] || [ ! -d "$IMAGES_DIR/test" ]; then
  rm -rf "$IMAGES_DIR"
  "$BUILD_DIR/loader" images export --dataset fashion-mnist --out "$IMAGES_DIR"
fi
if /usr/bin/python3 -c 'import torchvision, PIL' 2>/dev/null; then
  /usr/bin/python3 scripts/check_image_folders.py --export "$IMAGES_DIR" --every 10
else
  echo "(torchvision not found: skipped checking $IMAGES_DIR with torchvision.datasets.ImageFolder)"
fi
# The training, its log, plot and PyTorch check are the tensor demo's, on the folders.
BUILD_DIR="$BUILD_DIR" DEMO_OUT=${DEMO_OUT:-fashion_mlp_images.pt} scripts/demo.sh --image-folder "$IMAGES_DIR" "$@"
