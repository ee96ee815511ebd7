// ZDL_CHECK's message carries the failed condition and its code location; programs show a
// library error caused by the user's input without that location (without_code_location).
#include <gtest/gtest.h>

#include "core/check.h"
#include "error_of.h"

namespace zdl {
namespace {

TEST(Check, ProgramsShowInputErrorsWithoutTheCodeLocation) {
  const int n = 7;
  const std::string e = testing::error_of([&] { ZDL_CHECK(n == (2 * (n - 4)), "'config.json': n_layer=", n, " but 3"); });
  EXPECT_NE(e.find(" failed at "), std::string::npos) << e;
  EXPECT_EQ(without_code_location(e), "'config.json': n_layer=7 but 3");
  // Messages without a location, and parentheses of the message itself, are left as they are.
  EXPECT_EQ(without_code_location("n_head (12) is wrong"), "n_head (12) is wrong");
  EXPECT_EQ(without_code_location("the file (a copy) failed at its end"), "the file (a copy) failed at its end");
  EXPECT_EQ(without_code_location(""), "");
}

}  // namespace
}  // namespace zdl
