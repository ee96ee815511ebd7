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

// Turns recording on while alive, also inside a NoGradGuard (activation checkpointing
// recomputes a forward with a graph from inside the backward pass, which records none).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace zdl
