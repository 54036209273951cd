// main() of the GPU suites (tests/CMakeLists.txt, label gpu): GoogleTest's, except that a run in which
// every test skipped (no device) and none failed exits with kSkipExitCode, which CTest reports as "Not
// Run" (SKIP_RETURN_CODE) instead of "Passed", so a summary never counts an untested GPU suite as a pass.
#include <gtest/gtest.h>

namespace {
constexpr int kSkipExitCode = 77;
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  if (status == 0 && run.successful_test_count() == 0 && run.failed_test_count() == 0 && run.skipped_test_count() > 0) {
    return kSkipExitCode;
  }
  return status;
}
