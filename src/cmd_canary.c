#include "cmd.h"
void cmd_canary_help(FILE *out) { fprintf(out, "usage: bangtrace canary\n"); }
int cmd_canary(int argc, char **argv) { (void)argc; (void)argv; return 2; }
