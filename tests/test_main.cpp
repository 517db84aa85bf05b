// main() of every softwave test executable: Kokkos lives for the whole run as
// a GoogleTest environment, so every test runs on Kokkos::DefaultExecutionSpace
// (OpenMP here, CUDA on the GPU machine) with the same sources. Kokkos is
// initialised in SetUp, not in main, so --gtest_list_tests (test discovery)
// never touches the device.

#include <Kokkos_Core.hpp>

#include <gtest/gtest.h>

#include <iostream>

namespace {

class KokkosEnvironment : public ::testing::Environment {
 public:
  KokkosEnvironment(int argc, char** argv) : argc_(argc), argv_(argv) {}

  void SetUp() override {
    Kokkos::initialize(argc_, argv_);
    std::cout << "[ kokkos   ] " << Kokkos::DefaultExecutionSpace::name()
              << ", concurrency " << Kokkos::DefaultExecutionSpace().concurrency()
              << std::endl;
  }
  void TearDown() override { Kokkos::finalize(); }

 private:
  int argc_;
  char** argv_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // GoogleTest owns (and deletes) the environment; Kokkos sees what GoogleTest
  // left of the command line (e.g. --kokkos-threads=N).
  ::testing::AddGlobalTestEnvironment(new KokkosEnvironment(argc, argv));
  return RUN_ALL_TESTS();
}
