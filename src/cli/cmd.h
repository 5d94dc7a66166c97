/* cmd.h - subcommands. Each cmd_<name>.c owns its flags and its --help
 * text; main.c holds the table. A command returns the process exit status:
 * 0 success, 1 "found something" where the command defines it (inspect finds
 * non-finite weights), 2 for any error (bad flag, bad file). */
#ifndef BT_CMD_H
#define BT_CMD_H

#include <stdio.h>

typedef struct bt_cmd {
    const char *name;
    const char *summary;                    /* one line for `bangtrace help` */
    int (*run)(int argc, char **argv);      /* argv[0] is the command name */
    void (*help)(FILE *out);                /* full usage */
} bt_cmd;

int cmd_run(int argc, char **argv);        void cmd_run_help(FILE *out);
int cmd_inspect(int argc, char **argv);    void cmd_inspect_help(FILE *out);
int cmd_tokenize(int argc, char **argv);   void cmd_tokenize_help(FILE *out);
int cmd_bench(int argc, char **argv);      void cmd_bench_help(FILE *out);
int cmd_forward(int argc, char **argv);    void cmd_forward_help(FILE *out);
int cmd_bisect(int argc, char **argv);     void cmd_bisect_help(FILE *out);
int cmd_report(int argc, char **argv);     void cmd_report_help(FILE *out);
int cmd_export(int argc, char **argv);     void cmd_export_help(FILE *out);
int cmd_browse(int argc, char **argv);     void cmd_browse_help(FILE *out);
int cmd_diff(int argc, char **argv);       void cmd_diff_help(FILE *out);
int cmd_serve(int argc, char **argv);      void cmd_serve_help(FILE *out);
int cmd_probe(int argc, char **argv);      void cmd_probe_help(FILE *out);
int cmd_canary(int argc, char **argv);     void cmd_canary_help(FILE *out);
int cmd_ctxwalk(int argc, char **argv);    void cmd_ctxwalk_help(FILE *out);

/* Shared by commands: print "bangtrace: <cmd>: <msg>" for the last error
 * and return 2. */
int bt_cmd_fail(const char *cmd);
/* Parse an int/float flag value or fail with a message naming the flag. */
int bt_parse_int(const char *flag, const char *s, long lo, long hi, long *out);
int bt_parse_float(const char *flag, const char *s, double lo, double hi, double *out);
/* A whole unsigned 64-bit value in decimal (seeds): anything else, a sign
 * or a value past 2^64-1 included, is an error naming the flag. */
int bt_parse_u64(const char *flag, const char *s, unsigned long long *out);

#endif
