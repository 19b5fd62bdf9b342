#!/usr/bin/env bash
# Serve a model with vLLM and torch-profiler support (stack traces off: smaller traces, and it
# avoids a known profiler crash). Chunked prefill on by default; pass CHUNKED=0 for off.
# Usage: MODEL=Qwen/Qwen3-Next-80B-A3B-Instruct PROFILE_DIR=/data/traces ./vllm.sh
set -euo pipefail
MODEL=${MODEL:?set MODEL}
PROFILE_DIR=${PROFILE_DIR:-$PWD/vllm-profiles}
PORT=${PORT:-8000}
CHUNKED=${CHUNKED:-1}
mkdir -p "$PROFILE_DIR"
args=(--port "$PORT"
      --profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$PROFILE_DIR\", \"torch_profiler_with_stack\": false, \"torch_profiler_use_gzip\": true}")
if [ "$CHUNKED" = 1 ]; then
  args+=(--enable-chunked-prefill --max-num-batched-tokens "${TOKEN_BUDGET:-2048}")
else  # without chunking a step must hold a whole prompt
  args+=(--no-enable-chunked-prefill --max-num-batched-tokens "${MAX_BATCHED_TOKENS:-16384}")
fi
exec vllm serve "$MODEL" "${args[@]}" "$@"
