# tests/local.mk - the test suite. Programs are C unit tests; *.sh drive the
# built binary. ASAN_TESTS (one line) is what `./quickstart check` reruns
# under ASan+UBSan.
ASAN_TESTS = tests/test_moe tests/moe_trace.sh tests/test_foreign tests/test_session tests/cli.sh tests/bad_input.sh tests/test_stats tests/test_gguf tests/test_request tests/test_tokenizer tests/test_sampler tests/test_trace tests/test_guard tests/test_inject tests/test_detect tests/test_tui tests/test_tui_cache tests/browse_dump.sh tests/diff.sh tests/bisect.sh tests/text_safety.sh tests/trace_hostile.sh tests/test_kernel_rows tests/export_perfetto.sh tests/arch.sh tests/test_activity tests/kernel_join.sh tests/hf_bad_input.sh tests/hf_mla_gptoss.sh tests/chat_templates.sh tests/hf_tokenizer_bad.sh tests/test_reply tests/fifo_inputs.sh tests/test_args tests/args_groups.sh tests/serve_batch.sh
TESTS += tests/manpage.sh
EXTRA_DIST += tests/manpage.sh
TESTS += tests/llamacpp.sh tests/link_invariants.sh tests/cli.sh tests/greedy_stories.sh tests/smollm_golden.sh tests/trace_run.sh tests/crash_run.sh tests/trace_safety.sh tests/constant_logits.sh
EXTRA_DIST += tests/llamacpp.sh tests/link_invariants.sh tests/browse_big.sh tests/cli.sh tests/greedy_stories.sh tests/smollm_golden.sh tests/golden/smollm2-q4_1.txt tests/trace_run.sh tests/crash_run.sh tests/trace_safety.sh tests/constant_logits.sh
# request parsing, chat templates, sampler / argmax rules
check_PROGRAMS += tests/test_request tests/test_sampler
TESTS += tests/test_request tests/test_sampler
tests_test_request_SOURCES = tests/test_request.c
tests_test_request_LDADD = $(CORE_LIBS)
tests_test_sampler_SOURCES = tests/test_sampler.c
tests_test_sampler_LDADD = $(CORE_LIBS)
# tokenizer: llama.cpp vectors, llama2.c and SmolLM2 encodings, `tokenize`
check_PROGRAMS += tests/test_tokenizer
TESTS += tests/test_tokenizer tests/tokenizer_vectors.sh tests/hf_tokenizers.sh tests/hf_folder.sh
tests_test_tokenizer_SOURCES = tests/test_tokenizer.c
tests_test_tokenizer_LDADD = $(CORE_LIBS)
EXTRA_DIST += tests/tokenizer_vectors.sh tests/hf_arch.sh tests/hf_make_arch.py tests/hf_bad_input.sh tests/hf_make_bad.py tests/hf_tokenizers.sh tests/hf_tokenizers_ref.py tests/hf_folder.sh
# gguf reader, inspect, bad input
check_PROGRAMS += tests/test_gguf
tests_test_gguf_SOURCES = tests/test_gguf.c
tests_test_gguf_LDADD = $(CORE_LIBS)
TESTS += tests/test_gguf tests/bad_input.sh tests/inspect.sh tests/special_ids.sh tests/arch.sh tests/hf_bad_input.sh tests/hf_arch.sh
check_PROGRAMS += tests/hf_check_tool
tests_hf_check_tool_SOURCES = tests/hf_check_tool.c
tests_hf_check_tool_LDADD = $(CORE_LIBS)
EXTRA_DIST += tests/bad_input.sh tests/inspect.sh tests/special_ids.sh tests/arch.sh tests/data-gen/make_bad_files.py
# CPU kernels: variants vs scalar, matmul, pool; dequantizers vs gguf.quants
check_PROGRAMS += tests/test_kernels tests/dequant_tool
TESTS += tests/test_kernels tests/dequant_check.py
tests_test_kernels_SOURCES = tests/test_kernels.c
tests_test_kernels_LDADD = $(CORE_LIBS)
tests_dequant_tool_SOURCES = tests/dequant_tool.c
tests_dequant_tool_LDADD = $(CORE_LIBS)
EXTRA_DIST += tests/dequant_check.py
# SHA-256 (the trace's model_sha256): FIPS 180-4's vectors on the C rounds
# and the x86 SHA extensions, and the two paths against each other
check_PROGRAMS += tests/test_sha256
TESTS += tests/test_sha256
tests_test_sha256_SOURCES = tests/test_sha256.c
tests_test_sha256_LDADD = $(CORE_LIBS)
# softmax's expf: every variant gives libm's bits (BT_EXPF_EXHAUSTIVE=1: all 2^32)
check_PROGRAMS += tests/test_expf
TESTS += tests/test_expf
tests_test_expf_SOURCES = tests/test_expf.c
tests_test_expf_LDADD = $(CORE_LIBS)
# mixture of experts: routing by hand-worked values, the scatter_add op;
# routes in the trace, expert injection and bisect naming the expert
check_PROGRAMS += tests/test_moe
TESTS += tests/test_moe tests/moe_trace.sh
EXTRA_DIST += tests/moe_trace.sh
tests_test_moe_SOURCES = tests/test_moe.c
tests_test_moe_LDADD = $(CORE_LIBS)
# tap statistics: every field of bt_stats_compute, NaN / +Inf / -Inf apart
check_PROGRAMS += tests/test_stats
TESTS += tests/test_stats
tests_test_stats_SOURCES = tests/test_stats.c
tests_test_stats_LDADD = $(BT_LIBS)
# fault injection, token detectors, libunwind backtraces and crash handling
check_PROGRAMS += tests/test_inject tests/test_detect tests/test_crash
TESTS += tests/test_inject tests/test_detect tests/test_crash tests/inject_truth.sh
EXTRA_DIST += tests/inject_truth.sh
tests_test_inject_SOURCES = tests/test_inject.c
tests_test_inject_LDADD = $(CORE_LIBS)
tests_test_detect_SOURCES = tests/test_detect.c
tests_test_detect_LDADD = $(CORE_LIBS)
tests_test_crash_SOURCES = tests/test_crash.c
tests_test_crash_LDADD = $(TRACE_LIBS)
# trace store: writer/reader round trip, views, bad files, size; kill -9; export --redact
check_PROGRAMS += tests/test_trace tests/trace_writer_tool tests/test_guard
TESTS += tests/test_trace tests/test_guard tests/trace_crash.sh tests/export.sh tests/trace_hostile.sh tests/trace_incomplete.sh
tests_test_trace_SOURCES = tests/test_trace.c
tests_test_trace_LDADD = $(TRACE_LIBS)
tests_trace_writer_tool_SOURCES = tests/trace_writer_tool.c
tests_test_guard_SOURCES = tests/test_guard.c
tests_test_guard_LDADD = $(TRACE_LIBS)
tests_trace_writer_tool_LDADD = $(TRACE_LIBS)
EXTRA_DIST += tests/trace_crash.sh tests/export.sh tests/trace_hostile.sh tests/trace_incomplete.sh
# bisect (plain and --reference) and report on real traces
TESTS += tests/bisect.sh tests/report.sh tests/counts.sh tests/numerics.sh tests/llama_golden.sh
# terminal safety: hostile model and trace text is escaped in every command
TESTS += tests/text_safety.sh
EXTRA_DIST += tests/text_safety.sh tests/data-gen/make_hostile_gguf.py
EXTRA_DIST += tests/bisect.sh tests/report.sh tests/counts.sh tests/numerics.sh tests/llama_golden.sh tests/golden/llama.cpp-stories260K.txt \
	tests/golden/llama.cpp-stories260K-nofa.txt
# chat templates: the published Qwen2.5, Qwen3, Llama 3 and Mistral templates against jinja2
TESTS += tests/chat_templates.sh
EXTRA_DIST += tests/chat_templates.sh tests/data/chat/qwen2.5-instruct.jinja tests/data/chat/qwen3.jinja \
	tests/data/chat/llama3-instruct.jinja tests/data/chat/mistral-v1.jinja tests/data/chat/mistral-v0.jinja \
	tests/data/chat/llama3.1-instruct.jinja tests/data/chat/llama3.2-instruct.jinja
# browser (tui/): layout, collapsing, colouring, sanitization, keys; dumps; tmux end to end
check_PROGRAMS += tests/test_tui
TESTS += tests/test_tui tests/browse_dump.sh tests/browse_tmux.sh tests/browse_big.sh
tests_test_tui_SOURCES = tests/test_tui.c
tests_test_tui_LDADD = $(BT_LIBS)
EXTRA_DIST += tests/browse_dump.sh tests/browse_tmux.sh tests/data-gen/make_trace.py
# browser: the Speculation view (dump + tmux; real-trace part SKIPs without run --spec-k)
TESTS += tests/browse_spec.sh
EXTRA_DIST += tests/browse_spec.sh
# speculative decoding: distribution of rejection sampling, greedy identity, trails
check_PROGRAMS += tests/test_spec
TESTS += tests/test_spec tests/spec.sh
tests_test_spec_SOURCES = tests/test_spec.c
tests_test_spec_LDADD = $(TRACE_LIBS)
EXTRA_DIST += tests/spec.sh
# diff: two traces compared (tokens, taps by step or by position, meta); speculative part SKIPs without run --spec-k
TESTS += tests/diff.sh tests/diff_spec.sh
EXTRA_DIST += tests/diff.sh tests/diff_spec.sh
# bisect / report / export on speculative traces (synthetic contract traces + real run --spec-k runs)
TESTS += tests/bisect_spec.sh
EXTRA_DIST += tests/bisect_spec.sh tests/data-gen/make_spec_trace.py
# the incident gallery (examples/incidents/): every case is a test
TESTS += examples/incidents/1-wall-of-bang/run.sh examples/incidents/2-out-of-range-token/run.sh \
	examples/incidents/3-drafter-not-guilty/run.sh examples/incidents/4-long-prompts/run.sh \
	examples/incidents/5-flipped-bit/run.sh examples/incidents/6-half-precision/run.sh \
	examples/incidents/7-gate-that-could-not-fail/run.sh examples/incidents/8-state-not-reset/run.sh \
	examples/incidents/9-pytorch-f16/run.sh examples/incidents/10-gptoss-f16/run.sh tests/sample_trace.sh
EXTRA_DIST += tools/model-edit tests/sample_trace.sh examples/incidents/1-wall-of-bang/run.sh \
	examples/incidents/2-out-of-range-token/run.sh examples/incidents/3-drafter-not-guilty/run.sh \
	examples/incidents/4-long-prompts/run.sh examples/incidents/5-flipped-bit/run.sh \
	examples/incidents/6-half-precision/run.sh examples/incidents/7-gate-that-could-not-fail/run.sh \
	examples/incidents/8-state-not-reset/run.sh examples/incidents/8-state-not-reset/README.md \
	examples/incidents/9-pytorch-f16/run.sh examples/incidents/9-pytorch-f16/record.py \
	examples/incidents/10-gptoss-f16/run.sh
# the one tap comparator (bisect --reference and diff): exactness, bf16, NaN, tolerance edge
check_PROGRAMS += tests/test_compare
TESTS += tests/test_compare
tests_test_compare_SOURCES = tests/test_compare.c
tests_test_compare_LDADD = $(BT_LIBS)
# numerics profiles: conversions bit-exact (numpy table, F16C), Q8 blocks, parsing, exact profile
check_PROGRAMS += tests/test_numerics
TESTS += tests/test_numerics
tests_test_numerics_SOURCES = tests/test_numerics.c
tests_test_numerics_LDADD = $(BT_LIBS)
# The CUDA kernels' per-block math (kernels/cuda/math.cuh) compiled for the
# host and checked against the CPU kernels: needs no GPU, never skips.
check_PROGRAMS += tests/test_cuda_math
TESTS += tests/test_cuda_math
tests_test_cuda_math_SOURCES = tests/test_cuda_math.c kernels/cuda/math.cuh
tests_test_cuda_math_LDADD = $(CORE_LIBS)
# tests/gpu/check.sh (the CUDA backend on a GPU) parses and SKIPs without one.
TESTS += tests/gpu_check_skip.sh
EXTRA_DIST += tests/gpu_check_skip.sh tests/gpu/check.sh
# CUPTI activity records -> trace rows (synthetic records, no GPU); with an
# argument it writes the synthetic kernel trace for export_perfetto.sh.
check_PROGRAMS += tests/test_kernel_rows
TESTS += tests/test_kernel_rows
tests_test_kernel_rows_SOURCES = tests/test_kernel_rows.c
tests_test_kernel_rows_LDADD = $(TRACE_LIBS)
TESTS += tests/export_perfetto.sh
EXTRA_DIST += tests/export_perfetto.sh
# the kernel trail end to end without a GPU: a CPU backend with the device
# hooks (enable, mark, activity) stands in for the CUDA plugin's CUPTI
TESTS += tests/kernel_join.sh tests/bisect_devices.sh
EXTRA_DIST += tests/kernel_join.sh tests/bisect_devices.sh
check_PROGRAMS += tests/test_activity
TESTS += tests/test_activity
tests_test_activity_SOURCES = tests/test_activity.c
tests_test_activity_LDADD = $(TRACE_LIBS)
# the session (model, engines, trace, recorders from one config) and the teacher-forced replay
check_PROGRAMS += tests/test_session
TESTS += tests/test_session
tests_test_session_SOURCES = tests/test_session.c
tests_test_session_LDADD = $(TRACE_LIBS)
# the backend seam: every op of every backend against a reference (the CPU
# backend against scalar references here; a device against the CPU in
# backend_cuda.sh, which SKIPs without the plugin or a GPU)
check_PROGRAMS += tests/test_backend
TESTS += tests/test_backend tests/backend_cuda.sh
tests_test_backend_SOURCES = tests/test_backend.c
tests_test_backend_LDADD = $(CORE_LIBS)
# a plugin resolves bt_error & co. against the program that loads it
tests_test_backend_LDFLAGS = -rdynamic
EXTRA_DIST += tests/backend_cuda.sh
# canary and ctxwalk (doc/production.md): loopback servers, bounded loops
TESTS += tests/canary_ctxwalk.sh
EXTRA_DIST += tests/canary_ctxwalk.sh

# a foreign engine (src/engines/llamacpp's shape) behind bt_engine, recorded
check_PROGRAMS += tests/test_foreign
TESTS += tests/test_foreign
tests_test_foreign_SOURCES = tests/test_foreign.c
tests_test_foreign_LDADD = $(LLAMA_ENGINE_LIBS) $(TRACE_LIBS) $(LLAMA_CPP_LIBS)
# docs: the README layout table, usage examples and the gallery match the tree
TESTS += tests/docs.sh
EXTRA_DIST += tests/docs.sh

# issue 22, the generation path of serve / probe / ctxwalk: chunked prefill,
# ctxwalk errors and context, serve's detector events, sampling through serve
TESTS += tests/serve_gen.sh
EXTRA_DIST += tests/serve_gen.sh

# serve robustness (issue 22, serve part): model names, /health, slow
# clients, a full trace disk, the queue before tokenizing, SIGTERM under load
TESTS += tests/serve_robust.sh
EXTRA_DIST += tests/serve_robust.sh

# issue 22, report/export --png (picture) and browser fixes (h5-png)
TESTS += tests/report_png.sh
EXTRA_DIST += tests/report_png.sh tests/png_pixels.py

# numerics profiles behind the backend seam (issue 22): the engine's numerics
# go through the backend's num_* ops (counted by a wrapper), the fallbacks of
# a device stand-in give the CPU's bits, mm_acc=f16 is refused there
check_PROGRAMS += tests/test_numerics_seam
TESTS += tests/test_numerics_seam
tests_test_numerics_seam_SOURCES = tests/test_numerics_seam.c
tests_test_numerics_seam_LDADD = $(CORE_LIBS)

# issue 22, fuzzing (h5-fuzz): what a server answers probe/canary/ctxwalk
# (bt_reply_header, bt_reply_parse; found by tests/fuzz/fuzz_reply)
check_PROGRAMS += tests/test_reply
TESTS += tests/test_reply
tests_test_reply_SOURCES = tests/test_reply.c
tests_test_reply_LDADD = $(CMD_LIBS)
# issue 22, mutation witnesses (h5-fuzz): the +Inf/-Inf split and the
# all-NaN argmax rules end to end
TESTS += tests/nonfinite_e2e.sh
EXTRA_DIST += tests/nonfinite_e2e.sh
# plain ChatML for chat_templates.sh (h5-fuzz)
EXTRA_DIST += tests/data/chat/chatml.jinja
# NEOX vs norm rope on real llama GGUFs against the numpy oracle (h5-fuzz)
TESTS += tests/oracle/test_rope_llama_gguf.py
EXTRA_DIST += tests/oracle/test_rope_llama_gguf.py

# h5-redact (issue 22): export --redact checked by an adversary; report for an upstream issue
TESTS += tests/redact_adversary.sh tests/report_public.sh
EXTRA_DIST += tests/redact_adversary.sh tests/redact_attack.py tests/report_public.sh

# issue 22, CLI hygiene and the fault audit's reader/file items
TESTS += tests/cli_hygiene.sh tests/fifo_inputs.sh tests/trace_readonly.sh
EXTRA_DIST += tests/cli_hygiene.sh tests/fifo_inputs.sh tests/trace_readonly.sh

# h5-tok: SentencePiece-converted tokenizer.json (BPE byte_fallback), the
# PCRE2 match limit for tokenizer.json Split regexes
TESTS += tests/hf_tokenizer_bad.sh tests/hf_spm.sh
EXTRA_DIST += tests/hf_tokenizer_bad.sh tests/hf_spm.sh tests/hf_make_spm.py tests/data/hf_spm_extra.inp
# issue 24, run --engine llama.cpp takes llama.cpp's own default path
# (flash attention auto, repacked weights, f16 KV; --llama-* flags)
TESTS += tests/llama_defaults.sh
EXTRA_DIST += tests/llama_defaults.sh

# h6-args (issue 23): the shared flag groups (src/cli/args.c) and the one
# device table (src/backend/registry.c); the same mistake gives the same line
# in every command
check_PROGRAMS += tests/test_args
TESTS += tests/test_args tests/args_groups.sh
tests_test_args_SOURCES = tests/test_args.c
tests_test_args_LDADD = $(CMD_LIBS)
EXTRA_DIST += tests/args_groups.sh
# issue 24, llama.cpp's server path (h6-llserve): serve --engine llama.cpp
# --parallel N against the real llama-server of the pinned build
TESTS += tests/llamacpp_serve.sh
EXTRA_DIST += tests/llamacpp_serve.sh
# h6-clean (issue 23, layout): the CUDA plugin's tap statistics are the
# math.cuh code test_cuda_math checks, not a copy
TESTS += tests/cuda_shared_math.sh
EXTRA_DIST += tests/cuda_shared_math.sh
# h6-clean: no exported function without a caller in another object
TESTS += tests/dead_exports.sh
EXTRA_DIST += tests/dead_exports.sh
# issue 23, the browser's views as a registry: each view's state is its
# own (tests/test_tui_views.c: made once, per view, freed with the app;
# tests/browse_views.sh: --step opens the Speculation view there, its
# cursor survives switching views, unknown view names list the registry)
check_PROGRAMS += tests/test_tui_views
TESTS += tests/test_tui_views tests/browse_views.sh
tests_test_tui_views_SOURCES = tests/test_tui_views.c
tests_test_tui_views_LDADD = $(BT_LIBS)
EXTRA_DIST += tests/browse_views.sh
# browser: the Cache view (a batched request's KV blocks, server.db beside it):
# layout and model on files made in the test; the dump on a real pad_nan pair
check_PROGRAMS += tests/test_tui_cache
TESTS += tests/test_tui_cache tests/browse_cache.sh
tests_test_tui_cache_SOURCES = tests/test_tui_cache.c
tests_test_tui_cache_LDADD = $(BT_LIBS)
EXTRA_DIST += tests/browse_cache.sh
# issue 25 (h6-oracle): tiny random-weight hybrid models (tools/make-tiny-hybrid.py)
# and the float64 gated-delta-net oracle (tests/oracle/ref_hybrid.py), checked
# against llama.cpp through its API (tests/oracle/llama_logits)
if HAVE_LLAMA_CPP
check_PROGRAMS += tests/oracle/llama_logits
tests_oracle_llama_logits_SOURCES = tests/oracle/llama_logits.c
tests_oracle_llama_logits_CPPFLAGS = $(AM_CPPFLAGS) $(LLAMA_CPP_CFLAGS)
tests_oracle_llama_logits_LDADD = $(LLAMA_CPP_LIBS)
endif
TESTS += tests/oracle/test_hybrid_llamacpp.py tests/oracle/test_hybrid_self.py tests/oracle/test_hybrid_forward.py
EXTRA_DIST += tools/make-tiny-hybrid.py tests/oracle/ref_hybrid.py tests/oracle/hybrid_common.py \
	tests/oracle/llama_logits.c tests/oracle/test_hybrid_llamacpp.py tests/oracle/test_hybrid_self.py \
	tests/oracle/test_hybrid_forward.py tests/oracle/fake_bangtrace_hybrid.py
# h6-gen (issue 23, layout): the one generation loop, with the core library
# alone (observer, stop strings, streaming, poll, requests stepped in turn)
check_PROGRAMS += tests/test_generate
TESTS += tests/test_generate
tests_test_generate_SOURCES = tests/test_generate.c
tests_test_generate_LDADD = $(CORE_LIBS)
# h6-gen: every meta key a run writes is run/run_meta.h's, read back by diff and report
TESTS += tests/run_meta.sh
EXTRA_DIST += tests/run_meta.sh
# issue 27 (h6-contam): probe --contamination, the black-box cross-request
# contamination probe: test servers that contaminate on purpose, a clean
# one, our serve, and the real llama-server with parallel slots
TESTS += tests/probe_contam.sh tests/probe_contam_llama.sh
check_PROGRAMS += tests/test_prod_contam
TESTS += tests/test_prod_contam
tests_test_prod_contam_SOURCES = tests/test_prod_contam.c
tests_test_prod_contam_LDADD = $(CORE_LIBS)
EXTRA_DIST += tests/probe_contam.sh tests/contam_server.py tests/probe_contam_llama.sh
# h6-gdn (issue 25, first slice): qwen35 hybrid gated delta net models
# against llama.cpp on a tiny model made by tools/make-tiny-hybrid.py
TESTS += tests/hybrid_llamacpp.sh
TESTS += tests/deepseek2_llamacpp.sh tests/oracle/test_deepseek2_forward.py
EXTRA_DIST += tests/deepseek2_llamacpp.sh tools/make-tiny-deepseek2.py tests/oracle/test_deepseek2_forward.py \
	tests/oracle/ref_deepseek2.py
EXTRA_DIST += tests/hybrid_llamacpp.sh tests/gguf_drop_key.py

# the batched forward over a paged KV cache (issue 26)
check_PROGRAMS += tests/test_batch
TESTS += tests/batch_engine.sh
EXTRA_DIST += tests/batch_engine.sh
tests_test_batch_SOURCES = tests/test_batch.c
tests_test_batch_LDADD = $(CORE_LIBS)

# the batched server: answers bit-identical to alone, server.db, the
# server's faults named by bisect and report (issue 26)
TESTS += tests/serve_batch.sh
EXTRA_DIST += tests/serve_batch.sh tests/serve_mix.py

# speculation on the hybrid models: the recurrent state rolled back after a
# rejection, lossless; --inject norollback named by diff and bisect (issue 25)
TESTS += tests/spec_hybrid.sh tests/spec_mtp.sh
EXTRA_DIST += tests/spec_hybrid.sh tests/spec_mtp.sh
# --engine llama.cpp --draft-mtp: llama.cpp's own MTP context drafts for the
# llama.cpp target; lossless, the trail, the native engine's drafts
TESTS += tests/spec_mtp_llamacpp.sh
EXTRA_DIST += tests/spec_mtp_llamacpp.sh

# --numerics state= on the hybrid models (issue 25)
TESTS += tests/numerics_state.sh
EXTRA_DIST += tests/numerics_state.sh

# gpt-oss's harmony chat format against its own template text (issue 28)
TESTS += tests/chat_harmony.sh
EXTRA_DIST += tests/chat_harmony.sh

# --numerics kv= on deepseek2's latent cache, f8_e4m3 among them (issue 28)
TESTS += tests/numerics_mla.sh
EXTRA_DIST += tests/numerics_mla.sh

# the hybrid models from Hugging Face folders, equal to their GGUFs (issue 25)
TESTS += tests/hf_hybrid.sh
EXTRA_DIST += tests/hf_hybrid.sh

# deepseek2 and gpt-oss from Hugging Face folders, equal to their GGUFs (issue 28)
TESTS += tests/hf_mla_gptoss.sh
EXTRA_DIST += tests/hf_mla_gptoss.sh

# libbangtrace and the Python package (issue 29): the C API through ctypes,
# and bangtrace.torch recording transformers against the native engine (the
# torch environment of tools/torch-env, created once under ~/.cache/bangtrace)
TESTS += tests/api_lib.sh tests/pytorch_record.sh
EXTRA_DIST += tests/api_lib.sh tests/pytorch_record.sh tests/pytorch/record_check.py tests/pytorch/common.py

# the vLLM plugin (bangtrace.vllm) on vLLM's CPU build, in that environment
TESTS += tests/pytorch_vllm.sh
EXTRA_DIST += tests/pytorch_vllm.sh tests/pytorch/vllm_check.py

# bangtrace.sglang on a stand-in with SGLang's layout, through SGLang's own
# hook_manager.py (tools/sglang-hook-manager)
TESTS += tests/pytorch_sglang.sh
EXTRA_DIST += tests/pytorch_sglang.sh tests/pytorch/sglang_check.py tests/pytorch/sglang_standin.py

# gpt-oss (tools/make-tiny-gptoss.py): against llama.cpp and the numpy oracle
check_PROGRAMS += tests/test_gptoss
tests_test_gptoss_SOURCES = tests/test_gptoss.c
tests_test_gptoss_LDADD = $(CORE_LIBS)
TESTS += tests/gptoss_llamacpp.sh
EXTRA_DIST += tests/gptoss_llamacpp.sh tools/make-tiny-gptoss.py
