// Whether ops record a graph. NoGradGuard turns recording off on this thread while alive
// (optimizer steps, evaluation, gradient computations inside backward).
//
//   { zdl::NoGradGuard g; w.copy_(w_new); }
#pragma once

namespace zdl {

bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace zdl
