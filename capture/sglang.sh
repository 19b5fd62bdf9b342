#!/usr/bin/env bash
# Serve a model with SGLang, writing torch-profiler traces to PROFILE_DIR.
# Chunked prefill on (CHUNKED=1, chunk TOKEN_BUDGET tokens) or off (CHUNKED=0).
# Usage: MODEL=Qwen/Qwen3-8B PROFILE_DIR=/data/traces ./sglang.sh
set -euo pipefail
MODEL=${MODEL:?set MODEL}
export SGLANG_TORCH_PROFILER_DIR=${PROFILE_DIR:-$PWD/sglang-profiles}
PORT=${PORT:-30000}
mkdir -p "$SGLANG_TORCH_PROFILER_DIR"
if [ "${CHUNKED:-1}" = 1 ]; then chunk=${TOKEN_BUDGET:-2048}; else chunk=-1; fi
exec python -m sglang.launch_server --model-path "$MODEL" --port "$PORT" \
  --chunked-prefill-size "$chunk" "$@"
