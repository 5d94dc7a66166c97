# src/tap/local.mk - taps (core library): tensor statistics, fault
# injection and token detectors. The recorder that writes them into a trace
# is src/run/recorder.c.
libbtcore_a_SOURCES += src/tap/inject.c src/tap/inject.h src/tap/detect.c src/tap/detect.h \
	src/tap/stats.c src/tap/stats.h
