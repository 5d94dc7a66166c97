# src/engines/llamacpp/local.mk - llama.cpp as a second engine (configure
# --with-llama-cpp). Its own library, so only it sees llama.h; without
# llama.cpp the stub says how to get it.
noinst_LIBRARIES += libbtllama.a
LLAMA_ENGINE_LIBS = libbtllama.a
libbtllama_a_CPPFLAGS = $(AM_CPPFLAGS) $(LLAMA_CPP_CFLAGS)
libbtllama_a_SOURCES = src/engines/llamacpp/llamacpp.h src/engines/llamacpp/names.c
if HAVE_LLAMA_CPP
libbtllama_a_SOURCES += src/engines/llamacpp/adapter.c src/engines/llamacpp/bench.c
else
libbtllama_a_SOURCES += src/engines/llamacpp/stub.c
endif
EXTRA_DIST += src/engines/llamacpp/adapter.c src/engines/llamacpp/bench.c src/engines/llamacpp/stub.c tools/llama-cpp tools/llama-cpp.sha256 tools/llama-cpp-fast.cmake tools/llama-cpp-noamx-cc
