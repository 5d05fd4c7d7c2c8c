// The `ranksim` command line: see app/cli.h.
#include "app/cli.h"

int main(int argc, char** argv) { return ranksim::app::main(argc, argv); }
