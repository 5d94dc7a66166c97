# src/model/local.mk - sources and tests of this module (included by Makefile.am)
libbtcore_a_SOURCES += src/model/gguf.c src/model/gguf.h src/model/model.c src/model/model.h \
	src/model/llama2c.c src/model/arch.c src/model/arch.h src/model/safetensors.c src/model/safetensors.h \
	src/model/hf.c src/model/hf.h src/model/spm_model.c src/model/spm_model.h
