# src/engine/local.mk - sources and tests of this module (included by Makefile.am)
libbtcore_a_SOURCES += src/engine/engine.c src/engine/engine.h src/engine/moe.c src/engine/moe.h src/engine/mla.c src/engine/mla.h src/engine/gptoss.c src/engine/gptoss.h src/engine/sampler.c src/engine/sampler.h
