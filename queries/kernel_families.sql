-- Kernel time by layer family (traceview's built-in classification preset).
--
-- Answers: which layer families does the GPU spend its time on?
-- Columns:
-- - family: text.
-- - kernels: the count of kernels.
-- - total_ns: the kernel time, in ns.
-- - mean_ns: in ns.
-- - share: the fraction of all kernel time, 0..1.
-- The rows are sorted by total_ns, largest first.
-- Device activity is every slice whose category is kernel, gpu_memcpy or gpu_memset.
-- The category may be in any case: older Kineto writes Kernel, Memcpy and Memset.
-- A slice of category cuda_graph is device activity too.
-- It is a whole CUDA-graph replay, in an Nsight export traced at graph level.
-- Rules are tried in order, and the first match wins.
-- Unmatched kernels are "other".
-- These are the same name rules as `traceview summarize`.
-- This query reads names only, and summarize reads more (docs/metrics.md).
-- - Summarize reads record_shapes to move the softmax kernels of eager attention into
--   full_attention.
-- - It moves Inductor templates launched under FlexAttention or vLLM's attention op
--   there too.
-- - It moves a GEMM that runs between an MoE router and its combine into moe.
-- - It counts the analysed device's serving kernels only.
--   This query counts every device's kernels, CUDA-graph capture at start-up included.
-- Generated from traceview/presets/default.toml by
--   python -m traceview.sqlengine.families_query > queries/kernel_families.sql
-- Example:
--   traceview sql queries/kernel_families.sql trace.json.gz
WITH k AS (
  SELECT name, category, dur FROM slice
  WHERE lower(category) IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'memcpy', 'memset', 'cuda_graph')
),
f AS (
  SELECT dur, CASE
    WHEN lower(category) IN ('cuda_graph') THEN 'cuda_graph'
    WHEN lower(category) IN ('gpu_memcpy', 'gpu_memset', 'memcpy', 'memset') THEN 'memory'
    WHEN lower(name) REGEXP '(?:flash_fwd_(splitkv_(combine_)?)?kernel)|(?:flashattnfwd(sm80|sm90|sm100|combine))|(?:flash_attn)|(?:(batch|single)(prefill|decode)with(paged|ragged)?kv(cache)?kernel)|(?:mergestates)|(?:batchmlapage)|(?:flash_fwd_\w*mla)|(?:_fwd_(grouped_)?kernel_stage[12])|(?:fmha_cutlass)|(?:sdpa)|(?:fmhasm1\d\d)|(?:paged_attention_(v[12]|ll4mi))|(?:kernel_unified_attention_[23]d)|(?:reduce_segments)|(?:fmha\w*kernel)|(?:fmha_fwd)|(?:attn_fwd)|(?:context_attention_fwd)|(?:efficient_attention)|(?:flex_(attention|decoding))|(?:reshape_and_cache(_flash)?)|(?:store_kvcache)|(?:concat_and_cache_mla)' THEN 'full_attention'
    WHEN lower(name) REGEXP '(?:chunk_gated_delta_rule_fwd_kernel_h)|(?:chunk_fwd_kernel_o)|(?:chunk_scaled_dot_kkt_fwd)|(?:recompute_w_u_fwd)|(?:chunk_local_cumsum)|(?:solve_tril)|(?:merge_16x16_to_\d+x\d+_inverse)|(?:chunk_kda_)|(?:_chunk_(cumsum|state|scan)_fwd)|(?:_bmm_chunk_fwd)|(?:_chunk_state_passing_fwd)|(?:causal_conv1d_fwd)' THEN 'linear_attention.prefill'
    WHEN lower(name) REGEXP '(?:fused_recurrent_)|(?:packed_decode)|(?:fused_sigmoid_gating_delta_rule_update)|(?:selective_(state|scan)_update)|(?:causal_conv1d_update)' THEN 'linear_attention.decode'
    WHEN lower(name) REGEXP '(?:fused_moe_kernel)|(?:moe_align_block_size)|(?:topkgatingsoftmax)|(?:_matmul_ogs_)|(?:moe::dev::)|(?:moe_sum)|(?:moe_forward)|(?:_combined_routing)|(?:_finalize_matmul_scatter)|(?:_sum_bitmatrix_rows)|(?:_topk_forward)|(?:bmm_\w*(mxe|e4m3|e2m1))|(?:grouped_?gemm)|(?:marlin_moe)|(?:moe_?gemm)|(?:moesorting)|(?:moe_(permute|unpermute|sorting))|(?:topk_?softmax)|(?:grouped_topk)|(?:fused_experts)|(?:cutlass_moe)|(?:m_grouped_\w*gemm)' THEN 'moe'
    WHEN lower(name) REGEXP '(?:nccl(sym)?devkernel_)|(?:ncclkernel)|(?:cross_device_reduce)|(?:all_?reduce)|(?:all_?gather)|(?:reduce_scatter)|(?:multimem_)' THEN 'communication'
    WHEN lower(name) REGEXP '(?:samplingfromprob)|(?:topktopp)|(?:topprenorm)|(?:argmaxops)|(?:softmax)|(?:gathertopk)|(?:sampling)' THEN 'sampling'
    WHEN lower(name) REGEXP '(?:rms_?norm)|(?:layer_?norm)|(?:rmsnorm2d)|(?:qk_?norm)|(?:group_norm)|(?:batch_norm)|(?:bn_fw)|(?:bn_bw)|(?:triton_(poi|red|per)_fused_\w*(mean\w*rsqrt|rsqrt\w*mean))|(?:triton_(poi|red|per)_fused_\w*native_(layer|group|batch)_norm)' THEN 'norm'
    WHEN lower(name) REGEXP '(?:cvt_fp\d+_to_fp[48])|(?:scaled_fp8_quant)|(?:per_token_group_quant)|(?:per_token_quant)|(?:dynamic_\w*quant)|(?:static_scaled_\w*quant)|(?:quantize_with_block_size)|(?:fp8_quant)|(?:fp4_quant)|(?:dequant)|(?:reconstruct_(exllama|gptq))' THEN 'quantization'
    WHEN lower(name) REGEXP '(?:rotary_embedding)|(?:rotary)|(?:\brope)|(?:_rope_)' THEN 'rope'
    WHEN lower(name) REGEXP '(?:act_and_mul)|(?:silu_and_mul)|(?:gelu_and_mul)|(?:gelu)|(?:silu_kernel)|(?:swiglu)|(?:triton_(poi|red|per)_fused_\w*(silu|gelu|sigmoid_mul|mul_sigmoid))' THEN 'activation'
    WHEN lower(name) REGEXP '(?:sm\d+_xmma_gemm)|(?:nvjet_)|(?:cutlass::kernel2?<)|(?:cutlass)|(?:ampere_\w*gemm)|(?:\bmarlin<)|(?:w8a8_\w*(matmul|scaled_mm))|(?:triton_tem_fused\w*_(add|b)?mm(_|$))|(?:cijk_)|(?:gemm)|(?:gemv)|(?:splitkreduce)|(?:dot_kernel)|(?:cublas)|(?:hipblaslt)|(?:_matmul_)|(?:bmm_)' THEN 'gemm'
    WHEN lower(name) REGEXP '(?:at::native::)|(?:triton_(poi|red|per)_)|(?:^triton__\d)|(?:elementwise)|(?:cudnn::)|(?:multi_tensor_apply)|(?:clamp_position)|(?:copy_page_indices)|(?:compute_position)|(?:resolve_future_token_ids)|(?:create_flashinfer_kv_indices)' THEN 'elementwise'
    ELSE 'other' END AS family
  FROM k
)
SELECT family, COUNT(*) AS kernels, SUM(dur) AS total_ns,
  1.0 * SUM(dur) / COUNT(*) AS mean_ns,
  1.0 * SUM(dur) / (SELECT SUM(dur) FROM k) AS share
FROM f GROUP BY family ORDER BY total_ns DESC, family;
