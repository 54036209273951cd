#include <gtest/gtest.h>
TEST(P, P) { GTEST_SKIP(); }
