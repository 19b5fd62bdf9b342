"""Classification: the preset on real kernel names, user rules, roll-up."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED, SHARED_TRACES, trace_params, truth

import traceview as tv
from traceview.analysis.classify.families import RulesError, load_rules, presets
from traceview.cli import cli

# (trace under ../shared/traces, kernel-name prefix, expected family, why): real names on real
# traces; the why is what the kernel computes, read from its engine's source, not what
# traceview printed.
REAL = [
    (
        "tracelens/b200-vllm-eager.json.gz",
        "fmhaSm100aKernel_",
        "full_attention",
        "TRT-LLM's fused multi-head attention for SM100: softmax(QK^T)V in one kernel",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "void vllm::reshape_and_cache_flash_kernel",
        "full_attention",
        "writes this step's K and V into the paged KV cache, which only attention reads",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "nvjet_tst_",
        "gemm",
        "cuBLAS's nvJet GEMM kernels (dense projections)",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "bmm_",
        "moe",
        "trtllm-gen's batched GEMMs over experts, launched by FlashInfer's fused MoE",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "void moe::dev::",
        "moe",
        "TRT-LLM's MoE routing and permutation kernels",
    ),
    (
        "tracelens/rocm-mi-vllm-decode-cudagraph.json.gz",
        "_matmul_ogs_",
        "moe",
        "triton_kernels' matmul with gather/scatter: a GEMM over each expert's routed tokens",
    ),
    (
        "tracelens/rocm-mi-vllm-decode-cudagraph.json.gz",
        "_topk_forward",
        "moe",
        "triton_kernels' router top-k: picks each token's experts",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "ncclDevKernel_AllGather",
        "communication",
        "NCCL all-gather between ranks",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "std::enable_if<(((8)>(0)))&&vllm::_typeConvert",
        "norm",
        "vLLM's fused add + RMSNorm, whose template is named after its _typeConvert constraint",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "Memcpy HtoD",
        "memory",
        "a copy from host to device",
    ),
    (
        "tracelens/h100-hf-qwen1.5-0.5b-chat.json.gz",
        "void pytorch_flash::flash_fwd_kernel",
        "full_attention",
        "FlashAttention-2 forward inside PyTorch's SDPA",
    ),
    (
        "tracelens/h100-hf-owlv2-large.json.gz",
        "std::enable_if<!(false), void>::type internal::gemvx::kernel",
        "gemm",
        "cuBLAS matrix-vector product: a GEMM with one column",
    ),
    (
        "tracelens/h100-hf-qwen1.5-0.5b-chat.json.gz",
        "void at::native::vectorized_elementwise_kernel<4, "
        "at::native::(anonymous namespace)::silu_kernel",
        "activation",
        "PyTorch's SiLU, the MLP's activation",
    ),
    (
        "tracelens/h100-hf-qwen1.5-0.5b-chat.json.gz",
        "Memset (Device)",
        "memory",
        "a device memset",
    ),
    (
        "tracelens/rocm-mi-sglang-qwen3-8b-decode.json.gz",
        "void paged_attention_ll4mi_",
        "full_attention",
        "ROCm paged-attention decode over the KV cache",
    ),
    (
        "tracelens/rocm-mi-sglang-qwen3-8b-decode.json.gz",
        "Cijk_",
        "gemm",
        "Tensile (rocBLAS/hipBLASLt) GEMM kernels, named after their index order",
    ),
    (
        "tracelens/rocm-mi-vllm-prefill-decode-piecewise.json.gz",
        "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2d",
        "norm",
        "Composable Kernel's 2-D RMSNorm",
    ),
    (
        "tracelens/rocm-mi-sglang-qwen3-8b-decode.json.gz",
        "_ZN7sgl_hip10activation18act_and_mul",
        "activation",
        "SGLang's fused activation times gate (SwiGLU)",
    ),
    (
        "tracelens/rocm-mi-sglang-qwen3-8b-decode.json.gz",
        "void rotary_embedding_kernel",
        "rope",
        "applies rotary position embeddings to Q and K",
    ),
    (
        "tracelens/rocm-mi-sglang-qwen3-8b-prefill-decode.json.gz",
        "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernel",
        "full_attention",
        "Composable Kernel's FMHA over a paged KV cache",
    ),
    (
        "tracelens/rocm-mi-sglang-qwen3-8b-prefill-decode.json.gz",
        "void (anonymous namespace)::store_kvcache",
        "full_attention",
        "stores this step's K and V into the KV cache",
    ),
    (
        "tracelens/rocm-mi-vllm-decode-cudagraph.json.gz",
        "kernel_unified_attention_2d",
        "full_attention",
        "vLLM's Triton unified attention (prefill and decode in one kernel)",
    ),
    (
        "tracelens/rocm-mi-vllm-decode-cudagraph.json.gz",
        "reduce_segments",
        "full_attention",
        "merges the 3-D unified attention's per-segment partial softmax results",
    ),
    (
        "tracelens/rocm-mi-sglang-qwen3-8b-decode.json.gz",
        "_ZN5aiter24add_rmsnorm_quant_kernel",
        "norm",
        "aiter's residual add + RMSNorm (with an fp8 quantized output); the norm is the work",
    ),
    (
        "tracelens/rocm-mi-vllm-decode-cudagraph.json.gz",
        "kernel_unified_attention_3d",
        "full_attention",
        "vLLM's Triton unified attention, split along the KV length",
    ),
    (
        "tracelens/torch-compile-triton.json.gz",
        "attn_fwd",
        "full_attention",
        "a Triton flash-attention forward",
    ),
    (
        "tracelens/torch-compile-triton.json.gz",
        "triton_red_fused_add_mean_mul_pow_rsqrt_0",
        "norm",
        "Inductor's fused reduction: x * rsqrt(mean(x^2) + eps) is an RMSNorm",
    ),
    (
        "tracelens/torch-compile-triton.json.gz",
        "triton_poi_fused__unsafe_view_mul_silu_2",
        "activation",
        "Inductor's pointwise SiLU times the gate",
    ),
    (
        "tracelens/torch-compile-triton.json.gz",
        "triton_poi_fused__unsafe_view_add_3",
        "elementwise",
        "Inductor's pointwise add (a residual), no reduction",
    ),
    (
        "tracelens/b300-sglang-qwen3-30b-a3b-moe-decode-graph.json.gz",
        "void (anonymous namespace)::fused_qknorm_warp",
        "norm",
        "SGLang's RMSNorm of the query and key heads (Qwen3's QK-norm)",
    ),
    (
        "tracelens/rocm-mi300x-sglang-qwen3-30b-a3b-moe-decode-graph.json.gz",
        "void ck_tile::kentry<2, ck_tile::MoeSortingKernel",
        "moe",
        "Composable Kernel's sort of tokens by expert before the grouped GEMM",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "void tensorrt_llm::kernels::quantize_with_block_size",
        "quantization",
        "TRT-LLM's block-scaled quantization of activations (to FP4/FP8)",
    ),
    (
        "tracelens/b200-vllm-eager.json.gz",
        "void vllm::scaled_fp8_quant_kernel",
        "quantization",
        "vLLM's activation quantization to FP8",
    ),
    (
        "hta/a100_nccl_data.json.gz",
        "ncclKernel_AllReduce_RING_LL_Sum_float",
        "communication",
        "NCCL all-reduce between ranks",
    ),
    (
        "hta/v100_df_index_resolver.json.gz",
        "void at::native::vectorized_elementwise_kernel",
        "elementwise",
        "PyTorch's generic pointwise kernel",
    ),
    (
        "hta/mi250_minitoy_rocm62.json.gz",
        "Cijk_",
        "gemm",
        "Tensile GEMM kernels",
    ),
    (
        "hta/v100_ns_resolution_rank0.json.gz",
        "void cudnn::bn_fw_tr_1C11",
        "norm",
        "cuDNN's batch-norm forward (training)",
    ),
]


@functools.cache
def _kernels(trace: str) -> pl.DataFrame:
    """One trace's kernel table, read once for all its cases (37 cases, 14 traces)."""
    return tv.kernels(tv.load(SHARED_TRACES / trace))


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")
@pytest.mark.parametrize(
    ("trace", "prefix", "family", "why"), REAL, ids=[f"{p[:40]}->{f}" for _, p, f, _ in REAL]
)
def test_real_kernel_names_land_in_their_family(
    trace: str, prefix: str, family: str, why: str
) -> None:
    table = _kernels(trace)
    rows = table.filter(pl.col("name").str.starts_with(prefix))
    assert rows.height > 0, f"no kernel named {prefix}… in {trace}"
    assert set(rows["family"].to_list()) == {family}


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")
def test_eager_attention_softmax_is_attention() -> None:
    """HF OWLv2 runs eager attention: QK^T, then ``aten::softmax``, then ·V. Its record_shapes
    say the softmax inputs are [16, 5185, 5185] (vision) and [12, 5, 5] (text): attention
    scores, so attention's work (46% of the trace's kernel time), not sampling's. The names
    (``cunn_SoftMaxForward``, ``softmax_warp_forward``) alone cannot tell this from a
    sampler's ``logits.softmax(-1)``; the launching op's shape does."""
    table = tv.kernels(tv.load(SHARED_TRACES / "tracelens/h100-hf-owlv2-large.json.gz"))
    rows = table.filter(pl.col("name").str.contains("(?i)softmax"))
    assert rows.height == 2
    assert set(rows["family"].to_list()) == {"full_attention"}


def _softmax_trace(path: Path, launches: list[tuple[str, list[list[int]] | None]]) -> Path:
    """A tiny trace: per launch, an ``aten::softmax`` with those input dims (None: the launch
    is outside any softmax op, as in a graph replay), its cudaLaunchKernel and the kernel."""
    events: list[dict] = []
    for i, (kernel, dims) in enumerate(launches):
        t = 100 * i
        if dims is not None:
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": "aten::softmax", "pid": 1, "tid": 1,
                 "ts": t, "dur": 10, "args": {"Input Dims": [dims, [], []]}}
            )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 2, "dur": 1, "args": {"correlation": i + 1}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t + 20,
             "dur": 5, "args": {"correlation": i + 1, "device": 0, "stream": 7}}
        )  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_softmax_family_follows_the_launching_ops_shape(tmp_path: Path) -> None:
    """Planted: which kernel names launched from 2-D (logits) and ≥3-D (scores) softmax ops,
    and which launch lies outside any op. Only a name whose every launch is ≥3-D moves."""
    sampler = "void at::native::cunn_SoftMaxForward<4, float, float, float, Epilogue>"
    scores = "void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 6>"
    mixed = "void at::native::cunn_SoftMaxForward<8, c10::Half, float, c10::Half, Epilogue>"
    path = _softmax_trace(
        tmp_path / "t.json",
        [
            (sampler, [2, 32000]),
            (scores, [4, 8, 64, 64]),
            (scores, [32, 1, 64]),
            (mixed, [4, 8, 64, 64]),
            (mixed, None),
            (sampler, [2, 32000]),
        ],
    )
    got = dict(tv.kernels(tv.load(path)).select("name", "family").iter_rows())
    assert got == {sampler: "sampling", scores: "full_attention", mixed: "sampling"}
    summary = tv.summarize(tv.load(path)).to_dict()
    fams = {f["family"]: f["count"] for f in summary["families"]}
    assert fams == {"sampling": 4, "full_attention": 2}


def _template_trace(
    path: Path, launches: list[tuple[str, str | list[tuple[str, str]] | None]]
) -> Path:
    """A tiny trace: per launch, a host op of that name around it (None: no op, as in a
    graph replay; a list: nested ranges of (category, name), outermost first), its
    cudaLaunchKernel and the kernel."""
    events: list[dict] = []
    for i, (kernel, op) in enumerate(launches):
        t = 100 * i
        ranges = [] if op is None else [("cpu_op", op)] if isinstance(op, str) else op
        for depth, (cat, name) in enumerate(ranges):
            events.append(
                {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": t,
                 "dur": 10 - depth}
            )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 2, "dur": 1, "args": {"correlation": i + 1}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t + 20,
             "dur": 5, "args": {"correlation": i + 1, "device": 0, "stream": 7}}
        )  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_flex_attention_templates_follow_the_launching_op(tmp_path: Path) -> None:
    """Planted: Inductor's template kernels under a ``flex_attention`` op are attention;
    the same prefix launched by a matmul (or once outside any op) keeps its name's family.
    The series' Part 8 FlexAttention trace runs ``triton_tem_fused_0`` so."""
    flex, mm, replayed = "triton_tem_fused_0", "triton_tem_fused_1", "triton_tem_fused_2"
    path = _template_trace(
        tmp_path / "t.json",
        [
            (flex, "flex_attention"),
            (mm, "aten::mm"),
            (flex, "torch.ops.higher_order.flex_attention"),
            (replayed, "flex_attention"),
            (replayed, None),
            ("triton_tem_fused_mm_4", "aten::mm"),
        ],
    )
    got = dict(tv.kernels(tv.load(path)).select("name", "family").iter_rows())
    assert got == {
        flex: "full_attention",
        mm: "other",
        replayed: "other",
        "triton_tem_fused_mm_4": "gemm",
    }


def test_compiled_flex_attention_templates_follow_the_evidence_a_trace_has(
    tmp_path: Path,
) -> None:
    """Compiled FlexAttention launches through Inductor's own record function, named after
    the kernel, with no flex_attention op around it. What a trace holds instead: vLLM's
    attention op around the compiled region, or (with stacks) the Python frames of a
    ``flex_attention.py``. A template under either is attention; one under neither keeps
    its name's family."""
    in_vllm, framed, plain = "triton_tem_fused_1", "triton_tem_fused_2", "triton_tem_fused_3"
    compiled = [("user_annotation", "Torch-Compiled Region: 0/3"), ("cpu_op", in_vllm)]
    path = _template_trace(
        tmp_path / "t.json",
        [
            (in_vllm, [("cpu_op", "vllm::unified_attention_with_output"), *compiled]),
            (in_vllm, [("cpu_op", "vllm::unified_attention_with_output"), *compiled]),
            (
                framed,
                [
                    (
                        "python_function",
                        "vllm/v1/attention/backends/flex_attention.py(612): forward",
                    ),
                    ("cpu_op", framed),
                ],
            ),
            (plain, [("user_annotation", "Torch-Compiled Region: 0/1"), ("cpu_op", plain)]),
        ],
    )
    got = dict(tv.kernels(tv.load(path)).select("name", "family").iter_rows())
    assert got == {in_vllm: "full_attention", framed: "full_attention", plain: "other"}


def test_fixture_families_equal_truth(scenario: str) -> None:
    t = truth(scenario)
    fam = tv.families(tv.load(GENERATED / f"{scenario}.json.gz"))
    # the analysed device's kernels, CUDA-graph capture (start-up) left out, as the summary
    assert {
        r["family"]: {"count": r["count"], "total_ns": r["total_ns"]} for r in fam.to_dicts()
    } == t["families"]
    assert fam["share"].sum() == pytest.approx(1.0)
    assert fam["total_ns"].is_sorted(descending=True)


def test_roll_up() -> None:
    t = truth("hybrid_chunked")
    fam = tv.families(tv.load(GENERATED / "hybrid_chunked.json.gz"), roll_up=True)
    linear = fam.filter(pl.col("family") == "linear_attention").row(0, named=True)
    expect = [v for k, v in t["families"].items() if k.startswith("linear_attention.")]
    assert linear["count"] == sum(v["count"] for v in expect)
    assert linear["total_ns"] == sum(v["total_ns"] for v in expect)


def test_user_rules_come_first(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nfamily = "gemm.fp8"\npatterns = ["^nvjet_"]\n')
    r = load_rules("default", rules)
    assert r.family_of("nvjet_tst_128x64_64x8_2x1_v_bz_TNT") == "gemm.fp8"
    assert r.family_of("sm90_xmma_gemm_bf16") == "gemm"
    result = CliRunner().invoke(
        cli,
        ["summarize", str(GENERATED / "hybrid_chunked.json.gz"), "--rules", str(rules), "--json"],
    )
    assert result.exit_code == 0, result.stderr
    assert '"family": "gemm.fp8"' in result.stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[rule]\n", "not valid TOML"),
        ('[[rule]]\npatterns = ["x"]\n', "needs a 'family' string"),
        ('[[rule]]\nfamily = "x"\n', "needs 'patterns' or 'categories'"),
        ('[[rule]]\nfamily = "x"\npatterns = ["("]\n', "bad pattern"),
        ('[roles]\nstep_markr = ["x"]\n', "unknown role(s) step_markr"),
    ],
    ids=["toml", "no-family", "no-patterns", "bad-regex", "unknown-role"],
)
def test_bad_rules_file_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(text)
    with pytest.raises(RulesError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_rules("default", rules)
    result = CliRunner().invoke(
        cli, ["summarize", str(GENERATED / "dense_sglang.json.gz"), "--rules", str(rules)]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {rules}") and len(result.stderr.splitlines()) == 1


def test_presets_listed_and_unknown_preset_rejected() -> None:
    assert "default" in presets()
    with pytest.raises(RulesError, match="unknown preset 'nope'"):
        load_rules("nope")


# Names from the engines' source (issue 10), each with the family it must land in.
NAMED = [
    ("void marlin_moe_wna16::Marlin<(vllm::ScalarType)5, 128, 8, 8, true, 4>(...)", "moe"),
    # AWQ/GPTQ (and FP8-on-Ampere) weight-only GEMMs: as a dense model's projections run
    (
        "void marlin::Marlin<(long)1125899906910725, (long)1125899906843648, (long)"
        "1125899906910725, (int)256, (int)1, (int)8, (int)8, true, (int)4, false>(...)",
        "gemm",
    ),
    ("void marlin::Marlin<__half, vllm::kU4.id(), 256, 1, 16, 4, 4, false, true, -1>", "gemm"),
    # the original IST-DASLab Marlin (AutoGPTQ), in no namespace
    ("void Marlin<256, 1, 16, 4, 4, 8>(int4 const*, int4 const*, int4*, ...)", "gemm"),
    # Triton block-FP8 GEMMs: SGLang's (and older vLLM's), current vLLM's
    ("_w8a8_block_fp8_matmul", "gemm"),
    ("_w8a8_triton_block_scaled_mm", "gemm"),
    # GPTQ's exllama path: the 4-bit weights unpacked to fp16 before a cuBLAS GEMM
    ("vllm::gptq::reconstruct_exllama_4bit_kernel", "quantization"),
    (
        "void vllm::gptq::reconstruct_gptq_kernel<vllm::gptq::MatrixView_q4_row, 4>(...)",
        "quantization",
    ),
    # Inductor's templates: named by the ops they fuse, or by FlexAttention
    ("triton_tem_fused_mm_0", "gemm"),
    ("triton_tem_fused_addmm_relu_3", "gemm"),
    ("triton_tem_fused__to_copy__unsafe_view_add_addmm_bmm_clone_mean_139", "gemm"),
    ("triton_tem_fused_flex_attention_0", "full_attention"),
    ("fused_moe_kernel", "moe"),
    ("void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int)", "moe"),
    ("void vllm::moe::topkGatingSoftmax<4, 128, 4, 16, int>(float const*, ...)", "moe"),
    ("void vllm::moe::moe_sum_kernel<c10::BFloat16, 2>(...)", "moe"),
    ("void deep_gemm::sm90_fp8_m_grouped_gemm_kernel<128, 128>(...)", "moe"),
    ("void cvt_fp16_to_fp4<__nv_bfloat16, false>(int, int, long, ...)", "quantization"),
    ("void silu_mul_cvt_fp16_to_fp4<__nv_bfloat16>(int, int, ...)", "quantization"),
    ("void vllm::scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(...)", "quantization"),
    ("_per_token_group_quant_fp8", "quantization"),
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16>(...)", "quantization"),
    ("fused_recurrent_gated_delta_rule_packed_decode_kernel", "linear_attention.decode"),
    ("fused_recurrent_gated_delta_rule_fwd_kernel", "linear_attention.decode"),
    ("fused_sigmoid_gating_delta_rule_update_kernel", "linear_attention.decode"),
    ("selective_state_update_kernel", "linear_attention.decode"),
    ("_causal_conv1d_update_kernel", "linear_attention.decode"),
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "linear_attention.prefill"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_5", "norm"),
    ("triton_per_fused_native_layer_norm_0", "norm"),
    ("triton_poi_fused_mul_silu_1", "activation"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
    # attention an unseen-trace probe found in other families (gemm, other): PyTorch's
    # memory-efficient SDPA, cuDNN's SDPA, SGLang's and vLLM's Triton attention, FlashInfer's
    # MLA on Hopper, FlashMLA
    (
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel"
        "<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
        "full_attention",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128",
        "full_attention",
    ),
    ("_fwd_grouped_kernel_stage1", "full_attention"),
    ("_fwd_kernel_stage1", "full_attention"),
    ("_fwd_kernel_stage2", "full_attention"),
    (
        "void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<KernelTraits, Params>"
        "(Params)",
        "full_attention",
    ),
    (
        "void flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8>>(...)",
        "full_attention",
    ),
    (
        "void flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, float, 512, 64>(...)",
        "full_attention",
    ),
]


@pytest.mark.parametrize(("name", "family"), NAMED, ids=[f"{n[:40]}->{f}" for n, f in NAMED])
def test_engine_kernel_names_land_in_their_family(name: str, family: str) -> None:
    assert load_rules().family_of(name) == family


@pytest.mark.parametrize(
    "name",
    [
        "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1",  # a convolution
        "_fwd_kernel_ep_scatter_1",  # SGLang's expert-parallel scatter, a Triton kernel
        # a bare _fwd_kernel is SGLang's extend attention, and lightning attention's linear
        # attention (MiniMax, TransNormerLLM) too: not named a family by its name alone
        "_fwd_kernel",
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn>",
    ],
)
def test_the_attention_patterns_leave_other_kernels_alone(name: str) -> None:
    """The patterns added for SDPA, Triton and MLA attention take no convolution, no
    other Triton ``_fwd_kernel…`` and no CUTLASS GEMM."""
    assert load_rules().family_of(name) != "full_attention"


INFERENCE_TRACES = sorted(SHARED_TRACES.glob("tracelens/*.json.gz"))


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")
@pytest.mark.parametrize("path", trace_params(INFERENCE_TRACES))
def test_other_holds_at_most_5_percent_of_inference_kernel_time(path: Path) -> None:
    fam = tv.families(tv.load(path), roll_up=True)
    if fam.height == 0:  # CUDA-graph capture alone: no served kernel to classify
        assert tv.summarize(tv.load(path)).to_dict()["steps"]["method"] == "none"
        return
    other = fam.filter(pl.col("family") == "other")["share"].sum()
    assert other <= 0.05, f"{path.name}: other holds {other:.1%} of kernel time"


def _moe_trace(tmp_path: Path, with_router: bool = True) -> Path:
    """Four MoE layers whose expert GEMMs carry TensorRT-LLM's names (an activation rule's
    ``swiGlu`` and a plain ``bmm_``), between a router and a finalize, and a dense GEMM
    outside them."""
    from fixtures.build import TraceBuilder

    tb = TraceBuilder()
    t = 1_000_000
    fc1 = "bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x128u2_s6_et128x8_swiGlu_schPd_sm100f"
    fc2 = "bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x128u2_s5_et128x8_schPd_sm100f"
    router = "void moe::dev::routing::routingCustom::routingIndicesDynBlockKernel<>(Params)"
    finalize = "void moe::dev::finalize::finalizeKernel<>(KernelParams)"
    for _ in range(4):
        seq = [("nvjet_sm103_tst_64x16_64x16_4x1_v_bz_TNT", 20_000)]
        if with_router:
            seq.append((router, 5_000))
        seq += [(fc1, 40_000), (fc2, 30_000)]
        if with_router:
            seq.append((finalize, 5_000))
        for name, dur in seq:
            tb.kernel(name, t, dur)
            t += dur + 2_000
    return tb.write(tmp_path / ("moe.json.gz" if with_router else "dense.json.gz"))


def test_expert_gemms_between_a_router_and_its_combine_are_moe(tmp_path: Path) -> None:
    """Issue 21, item 5: MoE from evidence. A GEMM whose launches sit between the router
    and the combine is an expert GEMM, whatever its name's own rule says; the same names
    with no router around them keep their name's family."""
    fams = dict(tv.kernels(tv.load(_moe_trace(tmp_path))).select("name", "family").iter_rows())
    assert sorted(set(fams.values())) == ["gemm", "moe"]
    assert [f for n, f in fams.items() if n.startswith("bmm_")] == ["moe", "moe"]
    assert fams["nvjet_sm103_tst_64x16_64x16_4x1_v_bz_TNT"] == "gemm"  # before the router
    plain = tv.kernels(tv.load(_moe_trace(tmp_path, with_router=False)))
    by_name = dict(plain.select("name", "family").iter_rows())
    assert {by_name[n] for n in by_name if n.startswith("bmm_")} == {"activation", "gemm"}


def test_moe_share_on_blackwell_is_that_of_the_same_model_on_mi300x() -> None:
    """The same model (Qwen3-30B-A3B, SGLang, decode under CUDA graphs) on B300 and MI300X:
    its expert GEMMs are named differently on each, and both read as MoE."""
    b300 = SHARED_TRACES / "tracelens" / "b300-sglang-qwen3-30b-a3b-moe-decode-graph.json.gz"
    mi300x = (
        SHARED_TRACES / "tracelens" / "rocm-mi300x-sglang-qwen3-30b-a3b-moe-decode-graph.json.gz"
    )
    if not b300.exists():
        pytest.skip("../shared/traces is not present")
    share = {}
    for path in (b300, mi300x):
        doc = tv.summarize(tv.load(path)).to_dict()
        share[path] = next(f["share"] for f in doc["families"] if f["family"] == "moe")
    assert share[b300] > 0.5 and abs(share[b300] - share[mi300x]) < 0.10
