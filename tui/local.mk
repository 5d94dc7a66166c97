# tui/local.mk - the trace browser, `bangtrace browse` (included by Makefile.am)
# The model layer and the dumps need no terminal; the views, the key table
# and the interactive loop are curses and built only with ncursesw.
libbttui_a_SOURCES += tui/tui.h tui/model_impl.h tui/model_kernels.h tui/model_cache.h tui/view.h \
	tui/sanitize.c tui/layout.c tui/app.c \
	tui/model_trace.c tui/model_tokens.c tui/model_step.c tui/model_walk.c tui/model_run.c tui/model_spec.c \
	tui/model_kernels.c tui/model_cache.c tui/dump.c
if HAVE_NCURSESW
libbttui_a_SOURCES += tui/keys.c \
	tui/view_common.c tui/view_tokens.c tui/view_step.c tui/view_walk.c tui/view_run.c tui/view_spec.c tui/view_kernels.c tui/view_cache.c \
	tui/browse.c tui/term_check.c
endif
EXTRA_DIST += tui/README.md
