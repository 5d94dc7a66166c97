# src/run/local.mk - a recorded run (trace library): the session (model,
# tokenizer, engines, injector, trace and recorders from one config), the
# recorder (the engine's eval callback into the trace writer) and the
# teacher-forced replay of a recorded trace.
libbttrace_a_SOURCES += src/run/session.c src/run/session.h
libbttrace_a_SOURCES += src/run/recorder.c src/run/recorder.h
libbttrace_a_SOURCES += src/run/replay.h src/run/replay.c
# serve's, probe's and ctxwalk's per-request slot: the generation loop with
# the request's own injector, recorder and trace
libbttrace_a_SOURCES += src/run/slot.c src/run/slot.h src/run/batcher.c src/run/batcher.h
libbttrace_a_SOURCES += src/run/run_meta.c src/run/run_meta.h
