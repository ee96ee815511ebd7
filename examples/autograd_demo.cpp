// Fits y = 3x - 2 + noise with a tiny two-layer network, using only tensors and autograd:
// the smallest end-to-end use of zerodl. Prints the loss falling and the memory ledger.
#include <cstdio>

#include "autograd/ops.h"
#include "core/memory.h"

using namespace zdl;

int main() {
  const int64_t N = 256, H = 16;
  Tensor x = Tensor::rand({N, 1}, /*seed=*/1, DType::F32, Device::cpu(), 0, -1.0, 1.0);
  Tensor y = add(mul(x, 3.0), add(Tensor::randn({N, 1}, 2, DType::F32, Device::cpu(), 0, 0.0, 0.05), -2.0));

  Tensor w1, b1, w2, b2;
  {
    MemoryScope scope(MemoryCategory::Parameter);
    w1 = Tensor::randn({H, 1}, 3, DType::F32, Device::cpu(), 0, 0.0, 0.5).set_name("w1").set_requires_grad(true);
    b1 = Tensor::zeros({H}).set_name("b1").set_requires_grad(true);
    w2 = Tensor::randn({1, H}, 4, DType::F32, Device::cpu(), 0, 0.0, 0.5).set_name("w2").set_requires_grad(true);
    b2 = Tensor::zeros({1}).set_name("b2").set_requires_grad(true);
  }
  const double lr = 0.1;
  for (int step = 0; step <= 200; ++step) {
    Tensor pred = linear(tanh(linear(x, w1, b1)), w2, b2);
    Tensor loss = mean(square(sub(pred, y)));
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard ng;
      for (Tensor* p : {&w1, &b1, &w2, &b2}) add_(*p, mul(p->grad(), -lr));
    }
    if (step % 40 == 0) std::printf("step %3d  loss %.5f\n", step, loss.item());
  }
  MemoryStats s = memory_ledger().stats(Device::cpu());
  std::printf("memory: param %lld B, grad %lld B, peak total %lld B\n",
              static_cast<long long>(s.current_of(MemoryCategory::Parameter)),
              static_cast<long long>(s.current_of(MemoryCategory::Gradient)), static_cast<long long>(s.total_peak));
  return 0;
}
