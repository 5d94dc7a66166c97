# src/gen/local.mk - generation: OpenAI-style requests and chat templates
# (core), the decoder (prefill chunks, plain and speculative steps) and the
# per-request generation loop (trace library: they still call the recorder).
libbtcore_a_SOURCES += src/gen/request.c src/gen/request.h src/gen/chat.c src/gen/chat.h
libbttrace_a_SOURCES += src/gen/decode.c src/gen/decode.h
libbttrace_a_SOURCES += src/gen/generate.c src/gen/generate.h
