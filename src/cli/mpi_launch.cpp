#include "cli/mpi_launch.hpp"

#include <string>

#include "cli/options.hpp"
#include "core/error.hpp"
#ifdef RRFP_HAVE_MPI
#include "dist/mpi_world.hpp"
#endif

namespace rrfp {

void run_as_mpi_process(std::int64_t timeout_ms, const std::function<void(Job&)>& body) {
#ifdef RRFP_HAVE_MPI
  if (!launched_by_mpirun())
    throw InputError("--transport mpi: start rrfp under mpirun (see docs/mpi.md)");
  MpiWorld world(MpiWorldOptions{.timeout_ms = timeout_ms});
  try {
    body(world);
  } catch (const InputError& e) {
    // Rank 0 says it here, before the shutdown barrier lets any process leave: once one exits
    // non-zero, mpirun ends the others, and a line rank 0 wrote after the world was gone was
    // lost so (in CI, when every rank refused the same bad layout at once).
    if (world.rank() == 0) print_input_error(e);
    throw QuietExit{2};
  } catch (const std::exception& e) {
    // One write: ranks failing together share mpirun's stderr, and a line written piece by
    // piece interleaves with theirs (a watchdog's report lost its rank prefix so, in CI).
    print_line("rrfp: run failed on mpi rank " + std::to_string(world.rank()) + ": " +
               as_flags(e.what()));
    world.abort(1);
  }
#else
  (void)timeout_ms;
  (void)body;
  throw InputError(
      "--transport mpi: this rrfp was built without Open MPI (scripts/install-deps.sh installs "
      "libopenmpi-dev)");
#endif
}

}  // namespace rrfp
