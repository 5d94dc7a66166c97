# kernels/cpu/local.mk - the CPU backend (core library): its vtable
# (backend_cpu.c, behind src/backend/'s seam) beside its kernels.
libbtcore_a_SOURCES += kernels/cpu/backend_cpu.c kernels/cpu/kernels.h kernels/cpu/kernels_impl.h kernels/cpu/dequant.c \
	kernels/cpu/dot.c kernels/cpu/dot_avx2.c kernels/cpu/dot_avx512.c kernels/cpu/exp.c kernels/cpu/pool.c kernels/cpu/matmul.c kernels/cpu/stats.c \
	kernels/cpu/numerics.c kernels/cpu/numerics.h
