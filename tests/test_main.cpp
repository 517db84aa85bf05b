// main() of every softwave test executable: Kokkos lives for the whole run as
// a GoogleTest environment, and the tests run on every execution space of
// execution_spaces.hpp (OpenMP here; the device and the host space on the GPU
// machine) with the same sources. Kokkos is initialised in SetUp, not in
// main, so --gtest_list_tests (test discovery) never touches the device.

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <iostream>
#include <type_traits>

namespace {

class KokkosEnvironment : public ::testing::Environment {
 public:
  KokkosEnvironment(int argc, char** argv) : argc_(argc), argv_(argv) {}

  void SetUp() override {
    Kokkos::initialize(argc_, argv_);
    print<Kokkos::DefaultExecutionSpace>();
    if (!std::is_same_v<Kokkos::DefaultExecutionSpace,
                        Kokkos::DefaultHostExecutionSpace>)
      print<Kokkos::DefaultHostExecutionSpace>();
  }
  void TearDown() override { Kokkos::finalize(); }

 private:
  template <class Space>
  static void print() {
    std::cout << "[ kokkos   ] " << Space::name() << ", concurrency "
              << Space().concurrency() << std::endl;
  }

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
