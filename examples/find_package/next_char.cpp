// A model defined outside zerodl's tree, sharded with ZeRO-3 and trained: it reads the last 8
// characters of a text and predicts the next one. Built against an installed zerodl with
// find_package (CMakeLists.txt beside it). Prints the loss every 40 steps with all 17 digits:
// the same lines on 1, 2 or 4 ranks.
#include <cstdio>
#include <string>
#include <vector>

#include "dist/zero/trainer.h"
#include "nn/layers.h"

using namespace zdl;

// The data: a few lines of public-domain verse (Blake, 1794), as characters.
const std::string kText =
    "Tyger Tyger, burning bright, In the forests of the night; "
    "What immortal hand or eye, Could frame thy fearful symmetry? "
    "In what distant deeps or skies. Burnt the fire of thine eyes? "
    "On what wings dare he aspire? What the hand, dare seize the fire? ";
constexpr int64_t kContext = 8;   // characters the model sees
constexpr int64_t kVocab = 128;   // ASCII

// One ZeRO unit: a pre-norm residual MLP. Its parameters are gathered for its forward and its
// backward and freed after each.
struct Mixer : nn::Module {
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> up, down;
  explicit Mixer(int64_t dim) : nn::Module("Mixer") {
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(dim));
    up = register_module("up", std::make_shared<nn::Linear>(dim, 4 * dim));
    down = register_module("down", std::make_shared<nn::Linear>(4 * dim, dim));
  }
  Tensor forward(const Tensor& x) override { return x + (*down)(gelu((*up)((*norm)(x)))); }
};

struct NextChar : nn::Module {
  static constexpr int64_t kEmbed = 16, kDim = kContext * kEmbed;
  std::shared_ptr<nn::Embedding> embed;  // not in a unit: the root unit, with the head
  std::vector<std::shared_ptr<Mixer>> mixers;
  std::shared_ptr<nn::Linear> head;
  NextChar() : nn::Module("NextChar") {
    embed = register_module("embed", std::make_shared<nn::Embedding>(kVocab, kEmbed));
    for (int i = 0; i < 2; ++i) mixers.push_back(register_module("mixer" + std::to_string(i), std::make_shared<Mixer>(kDim)));
    head = register_module("head", std::make_shared<nn::Linear>(kDim, kVocab));
  }
  // ids [b, kContext] -> logits [b, kVocab]
  Tensor forward(const Tensor& ids) override {
    Tensor x = reshape((*embed)(ids), {ids.shape()[0], kDim});
    for (auto& m : mixers) x = (*m)(x);
    return (*head)(x);
  }
};

int main() {
  auto comm = dist::init();  // N ranks under mpirun; one process without it
  const int64_t N = comm->size();
  constexpr int64_t kRowsPerStep = 32, kMicro = 8;
  if (kRowsPerStep % (kMicro * N) != 0) {
    std::fprintf(stderr, "next_char: run it on 1, 2 or 4 ranks (32 rows per step in micro-batches of 8)\n");
    return 2;
  }
  dist::ZeroPartitioner zero(comm, {.stage = dist::ZeroStage::Three,
                                    .is_unit = [](const nn::Module& m) { return m.type_name() == "Mixer"; }});
  std::shared_ptr<NextChar> model;
  {
    auto scope = zero.placement_scope(/*seed=*/1);  // each rank creates only its shards
    model = std::make_shared<NextChar>();
  }
  zero.wrap(*model);
  dist::ZeroAdamW opt(zero, {.lr = 3e-3}, /*weight_decay=*/0.0);
  dist::Trainer trainer(zero, opt, {.grad_accum = kRowsPerStep / (kMicro * N), .micro_batch = kMicro, .grad_clip = 1.0, .seed = 7});

  // Row r of step s: the kContext characters at a position that walks through the text, and
  // the character after them.
  const int64_t positions = static_cast<int64_t>(kText.size()) - kContext;
  auto rows = [&](int64_t step, int64_t first, int64_t count) {
    std::vector<int64_t> ids, next;
    for (int64_t r = first; r < first + count; ++r) {
      const int64_t at = ((step * kRowsPerStep + r) * 7) % positions;
      for (int64_t c = 0; c < kContext; ++c) ids.push_back(static_cast<unsigned char>(kText[at + c]) % kVocab);
      next.push_back(static_cast<unsigned char>(kText[at + kContext]) % kVocab);
    }
    return dist::Trainer::Batch{Tensor::from_vector(ids, {count, kContext}, DType::I64),
                                Tensor::from_vector(next, {count}, DType::I64)};
  };
  auto loss = [&](const Tensor& ids, const Tensor& next) { return cross_entropy((*model)(ids), next); };

  model->train();
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    dist::StepResult r = trainer.step(step, rows, loss);  // the same double on every rank
    (step == 0 ? first : last) = r.loss;
    if (comm->rank() == 0 && step % 40 == 0) std::printf("step %3d loss %.17g\n", step, r.loss);
  }
  if (comm->rank() == 0) std::printf("loss %.4f -> %.4f on %lld rank(s)\n", first, last, static_cast<long long>(N));
  return last < 0.25 * first ? 0 : 1;  // it learned the text
}
