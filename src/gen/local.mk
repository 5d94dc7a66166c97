# src/gen/local.mk - generation (core): OpenAI-style requests and chat
# templates, the decoder (prefill chunks, plain and speculative steps) and
# the generation loop; both report to an observer (gen/observer.h), never to
# the recorder.
libbtcore_a_SOURCES += src/gen/request.c src/gen/request.h src/gen/chat.c src/gen/chat.h
libbtcore_a_SOURCES += src/gen/observer.h src/gen/decode.c src/gen/decode.h
libbtcore_a_SOURCES += src/gen/generate.c src/gen/generate.h
