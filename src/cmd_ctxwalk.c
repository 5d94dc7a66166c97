#include "cmd.h"
void cmd_ctxwalk_help(FILE *out) { fprintf(out, "usage: bangtrace ctxwalk\n"); }
int cmd_ctxwalk(int argc, char **argv) { (void)argc; (void)argv; return 2; }
