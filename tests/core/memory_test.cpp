// The memory ledger is exact: bytes requested per category, current and peak, and the cap.
#include <gtest/gtest.h>

#include "core/memory.h"
#include "core/tensor.h"

namespace zdl {

namespace {
int64_t cur(MemoryCategory c) { return memory_ledger().stats(Device::cpu()).current_of(c); }
int64_t peak(MemoryCategory c) { return memory_ledger().stats(Device::cpu()).peak_of(c); }
}  // namespace

TEST(MemoryLedger, CountsEveryCategoryExactly) {
  memory_ledger().reset_peaks(Device::cpu());
  const MemoryCategory cats[] = {MemoryCategory::Parameter,  MemoryCategory::ParameterShard, MemoryCategory::Gradient,
                                 MemoryCategory::GradientShard, MemoryCategory::OptimizerState, MemoryCategory::Activation,
                                 MemoryCategory::CommBuffer, MemoryCategory::Workspace};
  int64_t base[kNumMemoryCategories];
  for (int i = 0; i < kNumMemoryCategories; ++i) base[i] = cur(cats[i]);
  std::vector<Tensor> keep;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    MemoryScope scope(cats[i]);
    keep.push_back(Tensor::empty({3 + i, 7}, DType::F32));      // (3+i)*7*4 bytes
    keep.push_back(Tensor::empty({5}, DType::BF16));            // 10 bytes
  }
  for (int i = 0; i < kNumMemoryCategories; ++i)
    EXPECT_EQ(cur(cats[i]) - base[i], (3 + i) * 7 * 4 + 10) << category_name(cats[i]);
  keep.clear();
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    EXPECT_EQ(cur(cats[i]), base[i]) << category_name(cats[i]);
    EXPECT_GE(peak(cats[i]) - base[i], (3 + i) * 7 * 4 + 10) << category_name(cats[i]);
  }
}

TEST(MemoryLedger, PeakTracksHighWaterMark) {
  MemoryScope scope(MemoryCategory::Workspace);
  int64_t base = cur(MemoryCategory::Workspace);
  memory_ledger().reset_peaks(Device::cpu());
  {
    Tensor a = Tensor::empty({1000}, DType::F64);  // 8000
    {
      Tensor b = Tensor::empty({500}, DType::F32);  // 2000
    }
    Tensor c = Tensor::empty({250}, DType::I32);  // 1000
    EXPECT_EQ(cur(MemoryCategory::Workspace) - base, 9000);
  }
  EXPECT_EQ(peak(MemoryCategory::Workspace) - base, 10000);
  EXPECT_EQ(cur(MemoryCategory::Workspace), base);
}

TEST(MemoryLedger, ScopesNestAndRestore) {
  EXPECT_EQ(current_memory_category(), MemoryCategory::Activation);
  {
    MemoryScope a(MemoryCategory::Parameter);
    {
      MemoryScope b(MemoryCategory::Gradient);
      EXPECT_EQ(current_memory_category(), MemoryCategory::Gradient);
    }
    EXPECT_EQ(current_memory_category(), MemoryCategory::Parameter);
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::Activation);
}

TEST(MemoryLedger, CapThrowsOutOfMemoryNamingCategory) {
  int64_t in_use = memory_ledger().stats(Device::cpu()).total_current;
  memory_ledger().set_cap(DeviceType::CPU, in_use + 4096);
  MemoryScope scope(MemoryCategory::OptimizerState);
  Tensor fits = Tensor::empty({1000}, DType::F32);  // 4000 bytes: under the cap
  try {
    Tensor too_big = Tensor::empty({100}, DType::F32);  // +400 bytes: over
    memory_ledger().set_cap(DeviceType::CPU, 0);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'optim'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("400 B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cap"), std::string::npos) << msg;
  }
  // Nothing was recorded for the failed allocation.
  EXPECT_EQ(memory_ledger().stats(Device::cpu()).total_current, in_use + 4000);
  memory_ledger().set_cap(DeviceType::CPU, 0);
}

TEST(Storage, ReleasedStorageIsAHardErrorNamingTheParameter) {
  Tensor w;
  {
    MemoryScope scope(MemoryCategory::Parameter);
    w = Tensor::ones({4, 3});
  }
  w.set_name("h.0.attn.c_attn.weight");
  Tensor view = w.detach();  // another view on the same storage, like a tensor saved for backward
  int64_t before = cur(MemoryCategory::Parameter);
  w.storage()->release();
  EXPECT_EQ(cur(MemoryCategory::Parameter), before - 48);
  EXPECT_TRUE(view.storage()->is_released());
  EXPECT_EQ(view.storage()->nbytes(), 48u);  // identity and size kept
  try {
    view.to_vector();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.attn.c_attn.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
  // Materialized again: the same storage serves the saved view.
  w.storage()->materialize(MemoryCategory::Parameter);
  w.fill_(2.0);
  EXPECT_EQ(view.to_vector(), std::vector<double>(12, 2.0));
  EXPECT_EQ(cur(MemoryCategory::Parameter), before);
}

}  // namespace zdl
