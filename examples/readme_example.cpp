// The README's 20-line example, compiled so it cannot rot. Keep the two in sync.
#include <cstdio>

#include "autograd/ops.h"
using namespace zdl;

int main() {
  Tensor x = Tensor::randn({64, 8}, /*seed=*/1);               // [B, C]
  Tensor y = Tensor::randn({64, 1}, /*seed=*/2);
  Tensor w, b;
  { MemoryScope s(MemoryCategory::Parameter);                   // bytes tagged "param"
    w = Tensor::randn({1, 8}, 3, DType::F32, Device::cpu(), 0, 0.0, 0.1).set_requires_grad(true);
    b = Tensor::zeros({1}).set_requires_grad(true); }
  for (int step = 0; step < 100; ++step) {
    Tensor loss = mean(square(linear(x, w, b) - y));            // x @ w^T + b
    w.set_grad(Tensor()); b.set_grad(Tensor());
    loss.backward();
    NoGradGuard ng;                                             // plain SGD
    add_(w, w.grad() * -0.1); add_(b, b.grad() * -0.1);
  }
  auto s = memory_ledger().stats(Device::cpu());
  std::printf("param bytes %lld, peak %lld\n", (long long)s.current_of(MemoryCategory::Parameter),
              (long long)s.total_peak);
}
