# src/tokenizer/local.mk - sources and tests of this module (included by Makefile.am)
libbtcore_a_SOURCES += src/tokenizer/tokenizer.c src/tokenizer/tokenizer.h \
	src/tokenizer/pretok.c src/tokenizer/pretok.h
