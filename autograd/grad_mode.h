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

// True while a checkpointed module's forward runs without a graph, to run again with one in the
// backward (nn/activation_checkpoint.h). An op that picks its implementation by whether it
// records a graph (cuDNN attention's graph cache) must then pick as if it did, so that the
// recompute gives the forward's bits.
bool recomputable_forward();
class RecomputableForwardGuard {
 public:
  RecomputableForwardGuard();
  ~RecomputableForwardGuard();
  RecomputableForwardGuard(const RecomputableForwardGuard&) = delete;
  RecomputableForwardGuard& operator=(const RecomputableForwardGuard&) = delete;

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
