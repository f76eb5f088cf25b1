#!/bin/sh
# Builds {{name}}.wasm from app.py and wit/ with componentize-py
# (pip install -r requirements.txt).
set -e
cd "$(dirname "$0")"
PYTHONDONTWRITEBYTECODE=1 componentize-py -d wit -w gadget-with-face componentize app -o {{name}}.wasm
