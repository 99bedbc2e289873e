// The `rrfp` program: every subcommand; `rrfp train` hands its checked command line to
// `rrfp-train` (cli/train_flags.hpp).
#include "cli/options.hpp"

int main(int argc, char** argv) {
  return rrfp::cli_main(argc, argv);
}
