#!/usr/bin/env bash
# Set everything up and run the demo on the local testbed (the README's first command).
#   bash scripts/demo.sh           # provision, run, tear down
#   bash scripts/demo.sh --keep    # leave the testbed and the stack up
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_phases.sh
phase "provision (venv + real tools)" python3 tools/provision.py --skip-image  # the demo runs no loop image
phase "demo" .venv/bin/python scripts/demo.py "$@"
phase_summary
