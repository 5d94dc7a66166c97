# src/api/local.mk - libbangtrace.so: the C API (src/api/bangtrace.h) other
# languages record through (the Python package in python/, doc/pytorch.md).
#
# The shared library is the API's object with the trace and core libraries
# behind it; every archive is compiled -fPIC (configure.ac) so it can be, and
# the version script exports bangtrace_* alone. Installed as
# $(libdir)/libbangtrace.so.1 with the libbangtrace.so link and
# $(includedir)/bangtrace.h.
noinst_LIBRARIES += libbtapi.a
libbtapi_a_SOURCES = src/api/api.c src/api/bangtrace.h
include_HEADERS = src/api/bangtrace.h
EXTRA_DIST += src/api/local.mk src/api/bangtrace.map

libbangtrace.so: libbtapi.a libbttrace.a libbtcore.a $(srcdir)/src/api/bangtrace.map
	$(AM_V_CCLD)$(CCLD) -shared -Wl,-soname,libbangtrace.so.1 -Wl,--version-script=$(srcdir)/src/api/bangtrace.map \
	  -Wl,-Bsymbolic $(AM_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ \
	  -Wl,--whole-archive libbtapi.a -Wl,--no-whole-archive $(TRACE_LIBS) $(LIBS)
ALL_LOCAL += libbangtrace.so
INSTALL_EXEC_LOCAL += install-libbangtrace
UNINSTALL_LOCAL += uninstall-libbangtrace
install-libbangtrace: libbangtrace.so
	$(MKDIR_P) '$(DESTDIR)$(libdir)'
	$(INSTALL_PROGRAM) libbangtrace.so '$(DESTDIR)$(libdir)/libbangtrace.so.1'
	cd '$(DESTDIR)$(libdir)' && rm -f libbangtrace.so && $(LN_S) libbangtrace.so.1 libbangtrace.so
uninstall-libbangtrace:
	rm -f '$(DESTDIR)$(libdir)/libbangtrace.so.1' '$(DESTDIR)$(libdir)/libbangtrace.so'
CLEANFILES += libbangtrace.so
