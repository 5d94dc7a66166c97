# tests/local.mk - the test suite. Programs are C unit tests; *.sh drive the
# built binary. ASAN_TESTS (one line) is what `./quickstart check` reruns
# under ASan+UBSan.
ASAN_TESTS = tests/cli.sh tests/bad_input.sh tests/test_gguf tests/test_request
TESTS += tests/cli.sh tests/greedy_stories.sh
EXTRA_DIST += tests/cli.sh tests/greedy_stories.sh
