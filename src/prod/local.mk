# src/prod/local.mk - production checks: answer classes and the statistics
# of probe / canary / ctxwalk (core: pure functions over counts and text),
# the canary's log (trace library), and the HTTP client and server (binary
# only: libcurl and libmicrohttpd stay out of the libraries).
libbtcore_a_SOURCES += src/prod/stats.c src/prod/stats.h src/prod/classify.c src/prod/classify.h
check_PROGRAMS += tests/test_prod_stats tests/test_prod_classify
TESTS += tests/test_prod_stats tests/test_prod_classify tests/prod_stats_scipy.py
tests_test_prod_stats_SOURCES = tests/test_prod_stats.c
tests_test_prod_stats_LDADD = $(CORE_LIBS)
tests_test_prod_classify_SOURCES = tests/test_prod_classify.c
tests_test_prod_classify_LDADD = $(CORE_LIBS)
EXTRA_DIST += tests/prod_stats_scipy.py tests/prod_stats_ref.tsv
# the canary's SQLite log (trace library: it writes SQLite)
libbttrace_a_SOURCES += src/prod/canary_log.h src/prod/canary_log.c
# the HTTP client and server and the commands (binary only)
libbtcmd_a_SOURCES += src/prod/target.c src/prod/target.h
TESTS += tests/serve_probe.sh
EXTRA_DIST += tests/serve_probe.sh
# the contamination probe (issue 27): the plan, bodies and verdict (core:
# pure), and sending the plan to a target (binary only, beside target.c)
libbtcore_a_SOURCES += src/prod/contam.c src/prod/contam.h
libbtcmd_a_SOURCES += src/prod/contam_run.c src/prod/contam_run.h
