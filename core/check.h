// Always-on checks that throw zdl::Error with file:line and the values involved.
// Library code never exits: callers (examples, tests) decide what an error means.
//
//   ZDL_CHECK(a.dim() == 2, "Linear: x must be 2-D, got shape=", a.shape());
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace zdl {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when an allocation would exceed the per-process memory cap (or the device is full).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline std::ostream& operator<<(std::ostream& os, const std::vector<int64_t>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os << ']';
}

template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}

[[noreturn]] inline void throw_error(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(str(msg, " (", cond, " failed at ", file, ":", line, ")"));
}

}  // namespace detail

// A check of the user's input (a file's field, a path): on failure throws zdl::Error with the
// message alone. ZDL_CHECK adds the code location, which helps with a bug, not with a bad file.
template <class... Args>
void require(bool ok, const Args&... parts) {
  if (!ok) throw Error(detail::str(parts...));
}

// `message` without ZDL_CHECK's trailing " (COND failed at FILE:LINE)": for programs that show a
// library's error as the user's input problem (exit 2), where the location says nothing to them.
inline std::string without_code_location(const std::string& message) {
  const size_t at = message.rfind(" failed at ");
  if (at == std::string::npos || message.empty() || message.back() != ')') return message;
  int depth = 0;  // the '(' that opens the location, skipping the condition's own parentheses
  for (size_t i = at; i-- > 0;) {
    if (message[i] == ')') ++depth;
    else if (message[i] == '(' && depth-- == 0) return i > 0 && message[i - 1] == ' ' ? message.substr(0, i - 1) : message;
  }
  return message;
}

// Formats a shape as [2,3,4]; used by every shape error message.
inline std::string shape_str(const std::vector<int64_t>& v) { return detail::str(v); }

}  // namespace zdl

#define ZDL_CHECK(cond, ...)                                                                   \
  do {                                                                                         \
    if (!(cond)) ::zdl::detail::throw_error(__FILE__, __LINE__, #cond, ::zdl::detail::str(__VA_ARGS__)); \
  } while (0)
