// Your own model sharded with ZeRO-3 and trained with the library step (docs/custom_model.md,
// section 3). Prints the loss every 50 steps, with all 17 digits: the same on 1, 2 or 4 ranks.
//   ./sharded_model                 # one process
//   mpirun -np 2 ./sharded_model    # 2 ranks: the same lines, bit for bit
#include <cstdio>

#include "dist/zero/trainer.h"
#include "nn/layers.h"

using namespace zdl;

struct Layer : nn::Module {  // one ZeRO unit: gathered for its forward and its backward
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::Dropout> drop;
  Layer(int64_t in, int64_t out) : nn::Module("Layer") {
    fc = register_module("fc", std::make_shared<nn::Linear>(in, out));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.1));
  }
  Tensor forward(const Tensor& x) override { return (*drop)(gelu((*fc)(x))); }
};

struct Mlp : nn::Module {
  std::shared_ptr<Layer> l1, l2;
  std::shared_ptr<nn::Linear> head;  // not in a unit: goes to the root unit
  Mlp() : nn::Module("Mlp") {
    l1 = register_module("l1", std::make_shared<Layer>(8, 32));
    l2 = register_module("l2", std::make_shared<Layer>(32, 32));
    head = register_module("head", std::make_shared<nn::Linear>(32, 1));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*l2)((*l1)(x))); }
};

int main() {
  auto comm = dist::init();  // N ranks under mpirun; one process without it
  const int64_t N = comm->size();
  if (64 % (16 * N) != 0) {
    std::fprintf(stderr, "sharded_model: run it on 1, 2 or 4 ranks (64 rows in micro-batches of 16)\n");
    return 2;
  }
  dist::ZeroPartitioner zero(comm, {.stage = dist::ZeroStage::Three,
                                    .is_unit = [](const nn::Module& m) { return m.type_name() == "Layer"; }});
  std::shared_ptr<Mlp> model;
  {
    auto scope = zero.placement_scope(/*seed=*/1);
    model = std::make_shared<Mlp>();
  }
  zero.wrap(*model);  // units l1, l2 and the root (head); flat buffers padded to multiples of N
  dist::ZeroAdamW opt(zero, {.lr = 1e-2}, /*weight_decay=*/0.0);

  // 64 rows per step in micro-batches of 16: 4 / N micro-steps on each rank.
  dist::Trainer trainer(zero, opt, {.grad_accum = 64 / (16 * N), .micro_batch = 16, .grad_clip = 1.0, .seed = 7});
  Tensor x = Tensor::randn({64, 8}, /*seed=*/1);
  Tensor y = sum(mul(x, x), {1}, /*keepdim=*/true);  // learn the squared norm
  auto rows = [&](int64_t /*step*/, int64_t first, int64_t count) {
    return dist::Trainer::Batch{contiguous(slice(x, 0, first, first + count)),
                                contiguous(slice(y, 0, first, first + count))};
  };
  auto loss = [&](const Tensor& in, const Tensor& target) { return mean(square((*model)(in) - target)); };
  model->train();
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    dist::StepResult r = trainer.step(step, rows, loss);  // the same double on every rank
    (step == 0 ? first : last) = r.loss;
    if (comm->rank() == 0 && step % 50 == 0) std::printf("step %3d loss %.17g\n", step, r.loss);
  }
  if (comm->rank() == 0) std::printf("loss %.4f -> %.4f on %lld rank(s)\n", first, last, static_cast<long long>(N));
  return last < 0.5 * first ? 0 : 1;  // it learned
}
