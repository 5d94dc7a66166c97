# src/base/local.mk - the floor every layer stands on (core library): status
# codes and messages, text escaping, the weight-type table, device-activity
# rows, and the plain records shared by taps, engine, backends and trace.
libbtcore_a_SOURCES += src/base/util.c src/base/util.h src/base/text.c src/base/text.h \
	src/base/dtype.c src/base/dtype.h src/base/kernel_rows.c src/base/kernel_rows.h src/base/records.h
