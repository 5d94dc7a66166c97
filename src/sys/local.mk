# src/sys/local.mk - host backtraces (libunwind), fatal-signal and interrupt handling, output-file safety
libbangtrace_a_SOURCES += src/sys/backtrace.c src/sys/backtrace.h src/sys/crash.c src/sys/crash.h \
	src/sys/outfile.c src/sys/outfile.h
