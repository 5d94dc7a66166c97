# src/backend/local.mk - the backend seam: the vtable and the registry that
# opens the built-in CPU backend (kernels/cpu/) or dlopens a device plugin
# (kernels/cuda/) (core library: no SQLite, no curses).
libbtcore_a_SOURCES += src/backend/backend.h src/backend/backend_impl.h src/backend/backend.c \
	src/backend/registry.c
