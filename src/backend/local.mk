# src/backend/local.mk - the backend seam: the vtable, the CPU backend and
# the registry that dlopens device plugins (core library: no SQLite, no
# curses; the CUDA plugin is built separately, see kernels/cuda).
libbtcore_a_SOURCES += src/backend/backend.h src/backend/backend_impl.h src/backend/backend.c \
	src/backend/cpu.c src/backend/registry.c
