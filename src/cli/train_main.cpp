// The `rrfp-train` program: the `rrfp` command line with the trainer linked in (LibTorch), which
// `rrfp train` runs (cli/train_flags.hpp).
#include "cli/options.hpp"
#include "cli/train_flags.hpp"

int main(int argc, char** argv) {
  rrfp::install_trainer();
  return rrfp::cli_main(argc, argv);
}
