#!/usr/bin/env bash
# The chunked-prefill experiment against a running server: 6 victim streams, 12 injected
# ~6,000-token prompts, while the server profiles. Run it once with the server started with
# chunked prefill on and once with it off (see README.md), then compare.
# Usage: ENGINE=vllm URL=http://localhost:8000 MODEL=... PROFILE_DIR=... OUT=run-on ./experiment.sh
set -euo pipefail
traceview capture server --url "${URL:?}" --engine "${ENGINE:?vllm or sglang}" \
  ${MODEL:+--model "$MODEL"} --victims 6 --inject 12 --prompt-tokens 6000 \
  --max-tokens 4096 --profile-dir "${PROFILE_DIR:?}" --stop-timeout 1800 -o "${OUT:?}"
