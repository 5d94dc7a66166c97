/* cli_check.h - checks main() makes around every command (cli_check.c). */
#ifndef BT_CLI_CHECK_H
#define BT_CLI_CHECK_H

#include <stdbool.h>
#include <stdio.h>

/* A flag that takes a value (per the command's --help text) followed by one
 * of the command's flags instead of a value: print one line naming the flag
 * and return BT_EINVAL; BT_OK otherwise. argv[0] is the command name. */
int bt_cli_check_values(const char *cmd, void (*help)(FILE *), int argc, char **argv);
/* Route stdout (when not a terminal) through a writer that keeps the first
 * write error's reason, for bt_cli_check_stdout. stdout is then a
 * fopencookie stream: fileno(stdout) is -1 (isatty(fileno(stdout)) is still
 * the right answer: false); code that needs the descriptor uses
 * STDOUT_FILENO. A terminal keeps glibc's own stream (curses needs it). */
void bt_cli_stdout_begin(void);
/* Flush stdout; a write error (now or earlier) prints one line and turns
 * status into 2. Returns the exit status. */
int bt_cli_check_stdout(int status);

#endif
