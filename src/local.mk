# src/local.mk - sources and tests of this module (included by Makefile.am)
libbtcore_a_SOURCES += src/util.c src/util.h src/text.c src/text.h src/request.c src/chat.c src/request.h
# the decoder opens and closes recorded steps: it sits with the recorder
libbttrace_a_SOURCES += src/decode.c src/decode.h
# model, tokenizer, engines, injector, trace and recorders from one config
libbttrace_a_SOURCES += src/session.c src/session.h
libbtcmd_a_SOURCES += src/cmd_common.c src/cmd_run.c src/cmd_inspect.c src/cmd_tokenize.c src/cmd_bench.c src/cmd_forward.c
libbtcmd_a_SOURCES += src/cli_check.c src/cli_check.h
