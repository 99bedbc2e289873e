#pragma once
// main() for GoogleTest programs launched by mpirun: MPI is initialised once, every process
// runs the same tests, and a failure on any rank makes the whole job exit non-zero.
#include <gtest/gtest.h>

#include "dist/mpi_world.hpp"

namespace rrfp::test {
inline MpiWorld* g_world = nullptr;
}  // namespace rrfp::test

#define RRFP_MPI_TEST_MAIN()                                         \
  int main(int argc, char** argv) {                                  \
    ::testing::InitGoogleTest(&argc, argv);                          \
    rrfp::MpiWorld world;                                            \
    rrfp::test::g_world = &world;                                    \
    const int rc = RUN_ALL_TESTS();                                  \
    if (rc != 0) {                                                   \
      std::fprintf(stderr, "rank %d: tests failed\n", world.rank()); \
      world.abort(1);                                                \
    }                                                                \
    return 0;                                                        \
  }
