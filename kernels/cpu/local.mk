# kernels/cpu/local.mk - sources and tests of this module (included by Makefile.am)
libbtcore_a_SOURCES += kernels/cpu/kernels.h kernels/cpu/kernels_impl.h kernels/cpu/dtype.c kernels/cpu/dequant.c \
	kernels/cpu/dot.c kernels/cpu/dot_avx2.c kernels/cpu/dot_avx512.c kernels/cpu/exp.c kernels/cpu/pool.c kernels/cpu/matmul.c
