// Writing your own model with the nn API: a module in a few lines, trained with AdamW.
// This is the README's example; tests run it (ctest -R custom_model) and check the loss falls.
#include <cstdio>

#include "nn/layers.h"
#include "optim/optimizer.h"

using namespace zdl;

struct TwoLayer : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  TwoLayer() : nn::Module("TwoLayer") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 1));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(gelu((*fc1)(x))); }
};

int main() {
  auto model = std::make_shared<TwoLayer>();
  optim::AdamW opt({{"all", model->parameters(), 0.0}}, {.lr = 1e-2});
  Tensor x = Tensor::randn({64, 8}, /*seed=*/1);
  Tensor y = sum(mul(x, x), {1}, /*keepdim=*/true);  // learn the squared norm: [64, 1]
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor loss = mean(square((*model)(x) - y));
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  std::printf("%s", model->to_string().c_str());
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < 0.2 * first ? 0 : 1;  // the test: it learned
}
