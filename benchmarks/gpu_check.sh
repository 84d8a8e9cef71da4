#!/usr/bin/env bash
# The model on one H100/H200 in under 8 minutes: bf16 pretraining steps (BERT-Base at 128 and 512) with each
# attention backend against transformers' BERT, model FLOPs utilisation, mixed-length inference; writes a JSON.
#
#   bash benchmarks/gpu_check.sh --peak_tflops 989 --output gpu_check.json
#
# Options are benchmarks/gpu_check.py's (--help lists them). Without a GPU it stops at once with exit status 2.
set -euo pipefail
cd "$(dirname "$0")/.."
exec timeout 480 "${PYTHON:-python}" "$(dirname "$0")/gpu_check.py" "$@"
