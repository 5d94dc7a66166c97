# src/sys/local.mk - host backtraces (libunwind) and fatal-signal handling
libbttrace_a_SOURCES += src/sys/backtrace.c src/sys/backtrace.h src/sys/crash.c src/sys/crash.h
