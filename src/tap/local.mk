# src/tap/local.mk - taps: statistics, fault injection, token detectors and
# the engine eval callback that ties them to the trace writer
libbangtrace_a_SOURCES += src/tap/inject.c src/tap/inject.h src/tap/detect.c src/tap/detect.h \
	src/tap/stats.c src/tap/stats.h src/tap/recorder.c src/tap/recorder.h
