#include "dist/zero/quantized_reduce.h"

#include <algorithm>
#include <vector>

#include "core/memory.h"
#include "kernels/cpu/quantize.h"

namespace zdl::dist {

namespace {

using kernels::cpu::dequantize_record;
using kernels::cpu::quantize_record;
using kernels::cpu::quantized_record_words;

// Adds `records` records of n values each (W words apart) into sum, in order, in f32.
void add_records(int64_t n, int64_t W, const int32_t* first, int64_t stride_records, int64_t records, float* sum,
                 float* scratch) {
  for (int64_t k = 0; k < records; ++k) {
    dequantize_record(DType::F32, n, first + k * stride_records * W, scratch);
    for (int64_t i = 0; i < n; ++i) sum[i] += scratch[i];
  }
}

// Hop 1 in flight; wait() runs the rest on the waiting thread.
class QuantizedReduceWork final : public Work {
 public:
  QuantizedReduceWork(Communicator& across, Tensor output, Tensor sent, Tensor received, std::shared_ptr<Work> hop1)
      : across_(across), output_(std::move(output)), sent_(std::move(sent)), received_(std::move(received)),
        hop1_(std::move(hop1)), phase_(current_comm_phase()) {}

  bool done() override { return finished_; }

  void wait() override {
    if (finished_) return;
    hop1_->wait();
    const int64_t M = across_.size(), S = output_.numel(), W = quantized_record_words(S);
    const int64_t R = received_.numel() / (M * W);
    const int32_t* got = received_.data<int32_t>();
    std::vector<float> partial(static_cast<size_t>(M * S), 0.0f), scratch(static_cast<size_t>(S));
    // The R peers' records of block (n', l) sit at [peer][n']: add them peer by peer.
    for (int64_t n = 0; n < M; ++n) add_records(S, W, got + n * W, M, R, partial.data() + n * S, scratch.data());
    Tensor sent2, received2;
    {
      MemoryScope ms(MemoryCategory::CommBuffer);
      sent2 = Tensor::empty({M * W}, DType::I32);
      received2 = Tensor::empty({M * W}, DType::I32);
    }
    for (int64_t n = 0; n < M; ++n) quantize_record(DType::F32, S, partial.data() + n * S, sent2.data<int32_t>() + n * W);
    sent_ = received_ = Tensor();  // hop 1's buffers are done
    {
      CommPhaseScope ps(phase_);  // recorded with hop 1, whenever the waiter runs this
      across_.all_to_all_async(sent2, received2)->wait();
    }
    std::vector<float> total(static_cast<size_t>(S), 0.0f);
    add_records(S, W, received2.data<int32_t>(), 1, M, total.data(), scratch.data());
    if (output_.dtype() == DType::F32) {
      std::copy(total.begin(), total.end(), output_.data<float>());
    } else {
      BFloat16* out = output_.data<BFloat16>();
      for (int64_t i = 0; i < S; ++i) out[i] = BFloat16(total[static_cast<size_t>(i)]);
    }
    output_ = Tensor();
    finished_ = true;
  }

 private:
  Communicator& across_;
  Tensor output_, sent_, received_;
  std::shared_ptr<Work> hop1_;
  CommPhase phase_;
  bool finished_ = false;
};

}  // namespace

std::shared_ptr<Work> quantized_reduce_scatter_async(Communicator& node, Communicator& across, const Tensor& input,
                                                     const Tensor& output) {
  const int64_t R = node.size(), M = across.size(), K = R * M, S = output.numel();
  const DType t = input.dtype();
  ZDL_CHECK(input.device().is_cpu() && output.device().is_cpu() && input.is_contiguous() && output.is_contiguous() &&
                input.numel() == K * S && output.dtype() == t && (t == DType::F32 || t == DType::BF16),
            node.prefix(), " quantized reduce-scatter: contiguous CPU f32/bf16 tensors of ", K, " x ", S, " and ", S,
            " elements, got ", input.numel(), " ", dtype_name(input.dtype()), " and ", output.numel(), " ",
            dtype_name(output.dtype()));
  const int64_t W = quantized_record_words(S);
  Tensor sent, received;
  {
    MemoryScope ms(MemoryCategory::CommBuffer);
    sent = Tensor::empty({R * M * W}, DType::I32);
    received = Tensor::empty({R * M * W}, DType::I32);
  }
  // Peer l' gets, for every node n', block n' R + l' of the input: slot [l'][n'].
  const char* in = static_cast<const char*>(input.raw_data());
  const size_t es = element_size(t);
  int32_t* out = sent.data<int32_t>();
  for (int64_t peer = 0; peer < R; ++peer)
    for (int64_t n = 0; n < M; ++n)
      quantize_record(t, S, in + static_cast<size_t>((n * R + peer) * S) * es, out + (peer * M + n) * W);
  std::shared_ptr<Work> hop1 = node.all_to_all_async(sent, received);
  return std::make_shared<QuantizedReduceWork>(across, output, sent, received, std::move(hop1));
}

}  // namespace zdl::dist
