# engines/llamacpp/local.mk - llama.cpp as a second engine (configure
# --with-llama-cpp). Its own library, so only it sees llama.h; without
# llama.cpp the stub says how to get it.
noinst_LIBRARIES += libbtllama.a
LLAMA_ENGINE_LIBS = libbtllama.a
libbtllama_a_CPPFLAGS = $(AM_CPPFLAGS) $(LLAMA_CPP_CFLAGS)
libbtllama_a_SOURCES = engines/llamacpp/llamacpp.h engines/llamacpp/names.c
if HAVE_LLAMA_CPP
libbtllama_a_SOURCES += engines/llamacpp/adapter.c engines/llamacpp/bench.c
else
libbtllama_a_SOURCES += engines/llamacpp/stub.c
endif
EXTRA_DIST += engines/llamacpp/adapter.c engines/llamacpp/bench.c engines/llamacpp/stub.c tools/llama-cpp tools/llama-cpp.sha256 tools/llama-cpp-fast.cmake
