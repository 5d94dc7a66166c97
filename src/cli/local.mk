# src/cli/local.mk - the commands (libbtcmd.a: linked into the binary and
# into the fuzz harnesses that drive the real dispatcher) and main.c, which
# only dispatches.
bangtrace_SOURCES = src/cli/main.c src/cli/cmd.h
libbtcmd_a_SOURCES += src/cli/cmd_common.c src/cli/args.c src/cli/args.h src/cli/cli_check.c src/cli/cli_check.h \
	src/cli/cmd_run.c src/cli/cmd_inspect.c src/cli/cmd_tokenize.c src/cli/cmd_bench.c src/cli/cmd_forward.c \
	src/cli/cmd_export.c src/cli/cmd_bisect.c src/cli/cmd_report.c src/cli/cmd_diff.c \
	src/cli/cmd_probe.c src/cli/cmd_serve.c src/cli/cmd_canary.c src/cli/cmd_ctxwalk.c src/cli/cmd_browse.c
