# src/trace/local.mk - the trace store: writer, reader, `bangtrace export`,
# and traces/schema.sql embedded into the binary as a C string. The string
# is generated with sed (no xxd) into the build tree, so it works out of
# tree and in `make distcheck` (traces/ is distributed; schema.c is not).
libbttrace_a_SOURCES += src/trace/trace.h src/trace/writer.c src/trace/reader.h src/trace/reader.c \
	src/trace/reader_impl.h src/trace/reader_browse.c \
	src/trace/runstate.h src/trace/runstate.c \
	src/trace/guard.h src/trace/guard.c src/trace/perfetto.h src/trace/perfetto.c
# `bangtrace export`: the copy (export.c) and the flags (src/cli/cmd_export.c)
libbttrace_a_SOURCES += src/trace/export.h src/trace/export.c
# the batched server's DIR/server.db (written by src/run/batcher.c)
libbttrace_a_SOURCES += src/trace/server_db.h src/trace/server_db.c
# and its reader (the browser's Cache view)
libbttrace_a_SOURCES += src/trace/server_reader.h src/trace/server_reader.c
nodist_libbttrace_a_SOURCES += src/trace/schema.c
BUILT_SOURCES += src/trace/schema.c
CLEANFILES += src/trace/schema.c

src/trace/schema.c: $(top_srcdir)/traces/schema.sql
	$(AM_V_GEN)$(MKDIR_P) src/trace && { \
	  echo '/* Generated from traces/schema.sql by src/trace/local.mk. Do not edit. */'; \
	  echo 'const char bt_trace_schema_sql[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $(top_srcdir)/traces/schema.sql && \
	  echo ';'; } > $@-t && mv -f $@-t $@
# the batched server's DIR/server.db (traces/server_schema.sql), embedded as above
nodist_libbttrace_a_SOURCES += src/trace/server_schema.c
BUILT_SOURCES += src/trace/server_schema.c
CLEANFILES += src/trace/server_schema.c
src/trace/server_schema.c: $(top_srcdir)/traces/server_schema.sql
	$(AM_V_GEN)$(MKDIR_P) src/trace && { \
	  echo '/* Generated from traces/server_schema.sql by src/trace/local.mk. Do not edit. */'; \
	  echo 'const char bt_server_schema_sql[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $(top_srcdir)/traces/server_schema.sql && \
	  echo ';'; } > $@-t && mv -f $@-t $@
# analysis shared by bisect, report and the browser
libbttrace_a_SOURCES += src/trace/analyze.h src/trace/analyze.c src/trace/headroom.h src/trace/headroom.c \
    src/trace/provenance.h src/trace/provenance.c
# the layers x steps PNG of report --png and export --png (libpng)
libbttrace_a_SOURCES += src/trace/picture.h src/trace/picture.c
# the one tap comparator (bisect --reference and diff)
libbttrace_a_SOURCES += src/trace/compare.h src/trace/compare.c
