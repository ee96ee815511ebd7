// For tests that compare against a reference tool (a Python module, a system package): without
// it they skip on a developer's machine, but fail where the environment variable CI is set, since
// scripts/setup.sh installs every reference there and a skip would hide a broken setup.
//
//   if (!have_reference) ZDL_SKIP_UNLESS_CI() << "python3-regex is not installed";
//
// One statement (safe after an unbraced if), and it returns from the test like GTEST_SKIP().
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace zdl::testing {

// CI set to anything but "", "0" or "false".
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string v = ci;
  return !v.empty() && v != "0" && v != "false";
}

}  // namespace zdl::testing

// GTEST_SKIP() and FAIL() are this same statement with a fixed result type.
#define ZDL_SKIP_UNLESS_CI()                                                                                  \
  return ::testing::internal::AssertHelper(                                                                   \
             ::zdl::testing::in_ci() ? ::testing::TestPartResult::kFatalFailure                               \
                                     : ::testing::TestPartResult::kSkip,                                      \
             __FILE__, __LINE__,                                                                              \
             ::zdl::testing::in_ci() ? "Failed: a reference this test needs is missing, and CI is set "      \
                                       "(scripts/setup.sh installs it)"                                        \
                                     : "") = ::testing::Message()
