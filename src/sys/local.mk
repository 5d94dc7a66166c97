# src/sys/local.mk - host backtraces (libunwind, optional), fatal-signal and interrupt handling, output-file safety
libbttrace_a_SOURCES += src/sys/backtrace.h src/sys/crash.c src/sys/crash.h \
	src/sys/outfile.c src/sys/outfile.h
if HAVE_LIBUNWIND
libbttrace_a_SOURCES += src/sys/backtrace.c
else
libbttrace_a_SOURCES += src/sys/backtrace_none.c
endif

