#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and run loader.
# Idempotent: a no-op (well under a second) when everything is there.  Run as root.
set -euo pipefail
pkgs=(build-essential cmake pkgconf libcaf-dev libboost-dev libgtest-dev libdlpack-dev zlib1g-dev libssl-dev
      nlohmann-json3-dev libcli11-dev libeigen3-dev libopenblas-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev
      python3-torch python3-numpy python3-matplotlib libtorch-dev python3-torchvision python3-pil
      dataset-fashion-mnist clang libclang-rt-14-dev procps iproute2 openssl
      pybind11-dev python3-pybind11 python3-dev python3-venv python3-pip python3-pytest)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
