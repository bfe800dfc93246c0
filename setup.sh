#!/usr/bin/env bash
# Set up everything the project needs, idempotently: Fashion-MNIST from
# Debian's package where apt is available, and a virtual environment in .venv
# with the project installed in editable mode (with its test dependencies and
# the --tracking trackers, which its tests read back).
# Re-running it is cheap: the environment is rebuilt only when pyproject.toml changes.
# TORCH_INDEX_URL: install torch and torchvision from that index first (GPU nodes
# whose NVIDIA driver is older than the CUDA of PyPI's torch, e.g.
# https://download.pytorch.org/whl/cu126; pytorch.org lists the indexes).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=.venv

if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's dataset-fashion-mnist"
    apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "setup: no Debian data package (needs apt and root); the first run downloads" \
         "Fashion-MNIST with torchvision, or pass --data-dir"
  fi
fi

if [ -n "${TORCH_INDEX_URL:-}" ]; then
  stamp="$VENV/.installed-$( (cat pyproject.toml; echo "$TORCH_INDEX_URL") | sha256sum | cut -c1-16)"
else
  stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
fi
if [ ! -e "$stamp" ]; then
  if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c "import ensurepip" 2>/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    fi
  fi
  echo "setup: creating $VENV and installing the project (torch is large: minutes on first run)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    echo "setup: torch and torchvision from $TORCH_INDEX_URL"
    # An existing environment would keep the torch it has: removed first.
    "$VENV/bin/python" -m pip uninstall -q -y torch torchvision >/dev/null 2>&1 || true
    "$VENV/bin/python" -m pip install -q --index-url "$TORCH_INDEX_URL" torch torchvision
  fi
  "$VENV/bin/python" -m pip install -q -e '.[test,tracking]'
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
