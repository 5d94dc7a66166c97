# src/tap/local.mk - taps: statistics, fault injection, token detectors
# (engine side, in the core library) and the recorder, the engine eval
# callback that ties them to the trace writer (trace library)
libbtcore_a_SOURCES += src/tap/inject.c src/tap/inject.h src/tap/detect.c src/tap/detect.h \
	src/tap/stats.c src/tap/stats.h src/tap/kernel_rows.c src/tap/kernel_rows.h
libbttrace_a_SOURCES += src/tap/recorder.c src/tap/recorder.h
