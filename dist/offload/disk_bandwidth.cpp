#include "dist/offload/disk_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <vector>

#include "core/tensor.h"
#include "dist/offload/nvme_store.h"

namespace zdl::dist {

double DiskBandwidth::seconds(int64_t read, int64_t written) const {
  auto at = [](int64_t bytes, double gbs) { return bytes > 0 ? static_cast<double>(bytes) / (gbs * 1e9) : 0.0; };
  return at(read, read_gbs) + at(written, write_gbs);
}

DiskBandwidth measure_disk_bandwidth(const std::string& dir, const std::string& prefix, int64_t bytes, bool direct) {
  using Clock = std::chrono::steady_clock;
  NvmeStore store(dir, prefix, direct);
  const int64_t piece = int64_t{64} << 20, n = std::max<int64_t>(1, (bytes + piece - 1) / piece);
  Tensor buffer = Tensor::full({piece / 4}, 1.0, DType::I32);  // page aligned, as the states are
  char* buf = static_cast<char*>(buffer.raw_data());
  std::vector<int64_t> at;
  for (int64_t i = 0; i < n; ++i) at.push_back(store.reserve(piece, "the bandwidth probe"));
  auto run = [&](bool write) {
    const auto t0 = Clock::now();
    std::vector<std::shared_future<void>> io;
    for (int64_t i = 0; i < n; ++i)
      io.push_back(write ? store.write_async(at[i], buf, piece) : store.read_async(at[i], buf, piece));
    for (auto& f : io) f.get();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return static_cast<double>(n * piece) / s / 1e9;
  };
  run(true);  // the first write of a region allocates its blocks; a run rewrites them
  DiskBandwidth bw;
  bw.write_gbs = run(true);
  bw.read_gbs = run(false);
  return bw;
}

}  // namespace zdl::dist
