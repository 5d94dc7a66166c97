# src/prod/local.mk - production checks: answer classes and the statistics
# of probe / canary / ctxwalk (core: pure functions over counts and text),
# per-request generation for serve and probe --model (trace library: it
# records), the HTTP client and server (binary only: libcurl and
# libmicrohttpd stay out of the libraries), and the commands.
libbtcore_a_SOURCES += src/prod/stats.c src/prod/stats.h src/prod/classify.c src/prod/classify.h
check_PROGRAMS += tests/test_prod_stats tests/test_prod_classify
TESTS += tests/test_prod_stats tests/test_prod_classify tests/prod_stats_scipy.py
tests_test_prod_stats_SOURCES = tests/test_prod_stats.c
tests_test_prod_stats_LDADD = $(CORE_LIBS)
tests_test_prod_classify_SOURCES = tests/test_prod_classify.c
tests_test_prod_classify_LDADD = $(CORE_LIBS)
EXTRA_DIST += tests/prod_stats_scipy.py tests/prod_stats_ref.tsv
# per-request generation (serve, probe --model, ctxwalk --model): records
libbttrace_a_SOURCES += src/prod/gen.c src/prod/gen.h
# the HTTP client and server and the commands (binary only)
libbtcmd_a_SOURCES += src/prod/target.c src/prod/target.h src/cmd_probe.c src/cmd_serve.c src/cmd_canary.c src/cmd_ctxwalk.c
TESTS += tests/serve_probe.sh
EXTRA_DIST += tests/serve_probe.sh
