# src/sys/local.mk - host backtraces (libunwind, optional) and fatal-signal handling
libbttrace_a_SOURCES += src/sys/backtrace.h src/sys/crash.c src/sys/crash.h
if HAVE_LIBUNWIND
libbttrace_a_SOURCES += src/sys/backtrace.c
else
libbttrace_a_SOURCES += src/sys/backtrace_none.c
endif

