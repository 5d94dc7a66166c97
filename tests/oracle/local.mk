# tests/oracle/local.mk - the numpy reference forward pass (the correctness
# oracle) and its tests (included by Makefile.am). Run through
# tests/run-python, which skips them where python3 or numpy is missing.
TESTS += tests/oracle/test_forward.py tests/oracle/test_oracle_self.py tests/oracle/test_llamacpp_arch.py \
	tests/oracle/test_moe.py tests/oracle/test_hf_arch.py tests/oracle/test_gptoss.py
EXTRA_DIST += tests/oracle/ref.py tests/oracle/make_random_gguf.py \
	tests/oracle/compare_forward.py tests/oracle/fake_bangtrace.py \
	tests/oracle/test_forward.py tests/oracle/test_oracle_self.py tests/oracle/test_llamacpp_arch.py \
	tests/oracle/test_moe.py tests/oracle/test_hf_arch.py tests/oracle/test_gptoss.py
