# tests/fuzz/local.mk - libFuzzer harnesses, one per parser (README.md).
# Built only in a tree configured with --enable-fuzz (clang); `make fuzz`
# runs each for BT_FUZZ_SECONDS (default 300), the test fuzz.sh for a short
# budget (BT_FUZZ_SECONDS, default 20).
FUZZ_TARGETS = tests/fuzz/fuzz_gguf tests/fuzz/fuzz_llama2c tests/fuzz/fuzz_llama2c_tok \
	tests/fuzz/fuzz_request tests/fuzz/fuzz_inject tests/fuzz/fuzz_tokenizer tests/fuzz/fuzz_trace \
	tests/fuzz/fuzz_safetensors tests/fuzz/fuzz_hf tests/fuzz/fuzz_reply tests/fuzz/fuzz_numerics tests/fuzz/fuzz_spm_model
FUZZ_CPPFLAGS = $(AM_CPPFLAGS) -DBT_SHARED_DEFAULT='"$(abs_top_srcdir)/../shared"'
EXTRA_DIST += tests/fuzz/README.md tests/fuzz/fuzz.h tests/fuzz/run.sh tests/fuzz/fuzz.sh \
	tests/fuzz/make_corpus.py tests/fuzz/corpus
if BT_FUZZ
noinst_PROGRAMS += $(FUZZ_TARGETS)
TESTS += tests/fuzz/fuzz.sh
tests_fuzz_fuzz_gguf_SOURCES = tests/fuzz/fuzz_gguf.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_llama2c_SOURCES = tests/fuzz/fuzz_llama2c.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_llama2c_tok_SOURCES = tests/fuzz/fuzz_llama2c_tok.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_request_SOURCES = tests/fuzz/fuzz_request.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_inject_SOURCES = tests/fuzz/fuzz_inject.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_tokenizer_SOURCES = tests/fuzz/fuzz_tokenizer.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_trace_SOURCES = tests/fuzz/fuzz_trace.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_safetensors_SOURCES = tests/fuzz/fuzz_safetensors.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_safetensors_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_safetensors_LDADD = $(CORE_LIBS)
tests_fuzz_fuzz_safetensors_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_hf_SOURCES = tests/fuzz/fuzz_hf.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_hf_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_hf_LDADD = $(CORE_LIBS)
tests_fuzz_fuzz_hf_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_reply_SOURCES = tests/fuzz/fuzz_reply.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_reply_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_reply_LDADD = $(CMD_LIBS)
tests_fuzz_fuzz_reply_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_numerics_SOURCES = tests/fuzz/fuzz_numerics.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_numerics_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_numerics_LDADD = $(BT_LIBS)
tests_fuzz_fuzz_numerics_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_spm_model_SOURCES = tests/fuzz/fuzz_spm_model.c tests/fuzz/fuzz.h
tests_fuzz_fuzz_spm_model_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_spm_model_LDADD = $(CORE_LIBS)
tests_fuzz_fuzz_spm_model_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_gguf_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_llama2c_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_llama2c_tok_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_request_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_inject_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_tokenizer_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_trace_CPPFLAGS = $(FUZZ_CPPFLAGS)
tests_fuzz_fuzz_gguf_LDADD = $(BT_LIBS)
tests_fuzz_fuzz_llama2c_LDADD = $(BT_LIBS)
tests_fuzz_fuzz_llama2c_tok_LDADD = $(BT_LIBS)
tests_fuzz_fuzz_request_LDADD = $(BT_LIBS)
tests_fuzz_fuzz_inject_LDADD = $(BT_LIBS)
tests_fuzz_fuzz_tokenizer_LDADD = $(BT_LIBS)
tests_fuzz_fuzz_trace_LDADD = $(CMD_LIBS)
tests_fuzz_fuzz_gguf_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_llama2c_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_llama2c_tok_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_request_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_inject_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_tokenizer_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_trace_LDFLAGS = -fsanitize=fuzzer
fuzz: $(FUZZ_TARGETS)
	BT_BUILDDIR='$(abs_top_builddir)' BT_SRCDIR='$(abs_top_srcdir)' \
	BT_SHARED="$${BT_SHARED:-$(abs_top_srcdir)/../shared}" \
	$(SHELL) $(srcdir)/tests/fuzz/run.sh "$${BT_FUZZ_SECONDS:-300}"
else
fuzz:
	@echo "make fuzz: this tree was configured without --enable-fuzz; run ./quickstart fuzz [SECONDS]" >&2; exit 2
endif
.PHONY: fuzz
