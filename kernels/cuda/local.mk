# kernels/cuda/local.mk - the CUDA backend plugin (included by Makefile.am).
#
# bangtrace-cuda.so is built with nvcc wherever configure found the toolkit
# (a compile error fails `make`, so CI with nvcc catches it) and installed in
# $(pkglibdir). It links the CUDA runtime statically (-cudart static: the
# plugin needs only the driver's libcuda.so at run time) and CUPTI
# dynamically; bangtrace itself links neither (tests/link_invariants.sh).
# Only bt_backend_plugin_init is exported (-fvisibility=hidden).
CUDA_PLUGIN_SRCS = kernels/cuda/backend_cuda.cu kernels/cuda/kernels.cu
CUDA_PLUGIN_HDRS = kernels/cuda/math.cuh kernels/cuda/cuda_impl.h src/backend/backend.h \
	src/backend/backend_impl.h src/base/records.h src/base/kernel_rows.h src/base/util.h
EXTRA_DIST += $(CUDA_PLUGIN_SRCS) $(CUDA_PLUGIN_HDRS) kernels/cuda/local.mk
NVCCFLAGS = -std=c++17 -O2 $(CUDA_GENCODE) -Xcompiler -fPIC,-fvisibility=hidden \
	-I$(top_srcdir)/src -I$(top_builddir)

if HAVE_CUDA
# Objects are NAME-cu.o, not NAME.cu.o: with the latter GNU make's built-in
# "%: %.o" rule offers to "make" the source itself by linking NAME.cu.o, and
# the dist step of a VPATH build then tries exactly that.
CUDA_PLUGIN_OBJS = kernels/cuda/backend_cuda-cu.o kernels/cuda/kernels-cu.o
kernels/cuda/%-cu.o: $(srcdir)/kernels/cuda/%.cu $(addprefix $(srcdir)/,$(CUDA_PLUGIN_HDRS))
	@$(MKDIR_P) kernels/cuda
	$(AM_V_GEN)$(NVCC) $(NVCCFLAGS) -c -o $@ $<

bangtrace-cuda.so: $(CUDA_PLUGIN_OBJS)
	$(AM_V_GEN)$(NVCC) -shared -cudart static -o $@ $(CUDA_PLUGIN_OBJS) $(CUDA_PLUGIN_LIBS)

ALL_LOCAL += bangtrace-cuda.so
INSTALL_EXEC_LOCAL += install-cuda-plugin
UNINSTALL_LOCAL += uninstall-cuda-plugin
install-cuda-plugin: bangtrace-cuda.so
	$(MKDIR_P) '$(DESTDIR)$(pkglibdir)'
	$(INSTALL_PROGRAM) bangtrace-cuda.so '$(DESTDIR)$(pkglibdir)/bangtrace-cuda.so'
uninstall-cuda-plugin:
	rm -f '$(DESTDIR)$(pkglibdir)/bangtrace-cuda.so'
CLEANFILES += bangtrace-cuda.so $(CUDA_PLUGIN_OBJS)
endif
