// The message of the zdl::Error that f throws, or "" when it throws none: for tests that check
// what an error says.
#pragma once
#include <functional>
#include <string>

#include "core/check.h"

namespace zdl::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace zdl::testing
