// GPT-2 export/import: round trip to identical logits, GPT-2 names and Conv1D layouts, the
// architecture inferred from a file, HF-style files (prefix, mask buffers, no metadata),
// mismatch errors, and an independent reader: PyTorch (plain json + struct + frombuffer, no
// safetensors package) runs GPT-2's forward pass from the exported file and must reproduce
// zdl's logits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>

#include "autograd/grad_mode.h"
#include "io/gpt2_format.h"
#include "nn/parameter_factory.h"
#include "skip_unless_ci.h"
#include "temp_dir.h"

namespace zdl::io {

namespace {

using testing::error_of;
using testing::TempDir;

nn::GPTConfig small_config() {
  return {.vocab_size = 50, .padded_vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

std::shared_ptr<nn::GPT> make_gpt(const nn::GPTConfig& cfg, uint64_t seed) {
  nn::InitContext ctx(seed);
  auto m = std::make_shared<nn::GPT>(cfg);
  // Default init leaves biases 0 and LayerNorms (1, 0): nudge every parameter so a swapped
  // or untransposed tensor cannot go unnoticed.
  NoGradGuard ng;
  uint64_t s = seed * 1000;
  for (auto& p : m->parameters()) p.copy_(add(p, Tensor::randn(p.shape(), ++s, p.dtype(), Device::cpu(), 0, 0.0, 0.05)));
  m->eval();
  return m;
}

Tensor sample_ids(int64_t B, int64_t T, int64_t V) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < B * T; ++i) v.push_back((i * 7 + 3) % V);
  return Tensor::from_vector(v, {B, T}, DType::I64);
}

std::vector<double> logits_of(nn::GPT& m, const Tensor& ids) {
  NoGradGuard ng;
  return m.logits(ids).to_vector();
}

void zero_all(nn::GPT& m) {
  NoGradGuard ng;
  for (auto& p : m.parameters()) p.zero_();
}

}  // namespace

TEST(GPT2Format, ExportThenImportGivesIdenticalLogits) {
  TempDir dir;
  auto a = make_gpt(small_config(), 1);
  export_gpt2(*a, dir / "gpt2.safetensors", {{"note", "test"}});

  auto b = make_gpt(small_config(), 2);
  zero_all(*b);
  load_gpt2(*b, dir / "gpt2.safetensors");
  Tensor ids = sample_ids(2, 16, 50);
  EXPECT_EQ(logits_of(*b, ids), logits_of(*a, ids));
  auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    SCOPED_TRACE(pa[i].first);
    if (pa[i].first == "wte.weight") {  // the file has the 50 real rows; padding comes back zero
      EXPECT_EQ(slice(pb[i].second, 0, 0, 50).to_vector(), slice(pa[i].second, 0, 0, 50).to_vector());
      EXPECT_EQ(slice(pb[i].second, 0, 50, 64).to_vector(), std::vector<double>(14 * 16, 0.0));
    } else {
      EXPECT_EQ(pb[i].second.to_vector(), pa[i].second.to_vector());
    }
  }
}

TEST(GPT2Format, FileHasGPT2NamesAndConv1DLayouts) {
  TempDir dir;
  auto m = make_gpt(small_config(), 3);
  export_gpt2(*m, dir / "gpt2.safetensors");
  SafetensorsHeader h = read_safetensors_header(dir / "gpt2.safetensors");
  const int64_t C = 16;
  EXPECT_EQ(h.entries.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(h.find("lm_head.weight"), nullptr);  // tied to wte
  EXPECT_EQ(h.find("wte.weight")->shape, (Shape{50, C}));  // vocab rows, padding dropped
  EXPECT_EQ(h.find("wpe.weight")->shape, (Shape{16, C}));
  EXPECT_EQ(h.find("h.1.ln_1.weight")->shape, Shape{C});
  EXPECT_EQ(h.find("h.1.attn.c_attn.weight")->shape, (Shape{C, 3 * C}));
  EXPECT_EQ(h.find("h.1.attn.c_attn.bias")->shape, Shape{3 * C});
  EXPECT_EQ(h.find("h.1.attn.c_proj.weight")->shape, (Shape{C, C}));
  EXPECT_EQ(h.find("h.1.mlp.c_fc.weight")->shape, (Shape{C, 4 * C}));
  EXPECT_EQ(h.find("h.1.mlp.c_proj.weight")->shape, (Shape{4 * C, C}));
  EXPECT_EQ(h.find("ln_f.bias")->shape, Shape{C});
  EXPECT_EQ(h.metadata.at("n_layer"), "2");
  EXPECT_EQ(h.metadata.at("n_head"), "2");
  EXPECT_EQ(h.metadata.at("n_embd"), "16");
  EXPECT_EQ(h.metadata.at("vocab_size"), "50");
  EXPECT_EQ(h.metadata.at("block_size"), "16");

  // Conv1D (in, out) is the transpose of zdl's Linear (out, in).
  SafetensorsFile f = load_safetensors(dir / "gpt2.safetensors");
  EXPECT_EQ(f.tensors.at("h.1.mlp.c_fc.weight").to_vector(), transpose(m->h[1]->mlp->c_fc->weight, 0, 1).to_vector());
  EXPECT_EQ(f.tensors.at("h.0.attn.c_attn.weight").to_vector(),
            transpose(m->h[0]->attn->c_attn->weight, 0, 1).to_vector());
  EXPECT_EQ(f.tensors.at("h.0.ln_2.bias").to_vector(), m->h[0]->ln_2->bias.to_vector());
}

TEST(GPT2Format, ConfigFromFileInfersTheArchitecture) {
  TempDir dir;
  auto cfg0 = small_config();
  cfg0.n_layer = 3;
  auto m = make_gpt(cfg0, 4);
  export_gpt2(*m, dir / "gpt2.safetensors");
  nn::GPTConfig cfg = config_from_gpt2_file(dir / "gpt2.safetensors");
  EXPECT_EQ(cfg.n_layer, 3);
  EXPECT_EQ(cfg.n_head, 2);
  EXPECT_EQ(cfg.n_embd, 16);
  EXPECT_EQ(cfg.vocab_size, 50);
  EXPECT_EQ(cfg.padded_vocab_size, 64);  // from the metadata
  EXPECT_EQ(cfg.block_size, 16);
  EXPECT_TRUE(cfg.bias);
  EXPECT_EQ(config_from_gpt2_file(dir / "gpt2.safetensors", {.padded_vocab_size = 128}).padded_vocab_size, 128);
  EXPECT_NE(error_of([&] { config_from_gpt2_file(dir / "gpt2.safetensors", {.n_head = 4}); })
                .find("written with n_head=2 but the overrides say n_head=4"),
            std::string::npos);
}

TEST(GPT2Format, ReadsHuggingFaceStyleFiles) {
  // GPT2LMHeadModel-style: "transformer." prefix, causal-mask buffers, lm_head, no metadata.
  TempDir dir;
  auto m = make_gpt(small_config(), 5);
  export_gpt2(*m, dir / "zdl.safetensors");
  NamedTensors hf;
  for (auto& [n, t] : load_safetensors(dir / "zdl.safetensors").tensors) hf.emplace_back("transformer." + n, t);
  for (int i = 0; i < 2; ++i) {
    hf.emplace_back("transformer.h." + std::to_string(i) + ".attn.bias", Tensor::ones({1, 1, 16, 16}));
    hf.emplace_back("transformer.h." + std::to_string(i) + ".attn.masked_bias", Tensor::scalar(-1e4));
  }
  hf.emplace_back("lm_head.weight", load_safetensors(dir / "zdl.safetensors").tensors.at("wte.weight"));
  save_safetensors(dir / "hf.safetensors", hf);

  std::string msg = error_of([&] { config_from_gpt2_file(dir / "hf.safetensors"); });
  EXPECT_NE(msg.find("does not record n_head"), std::string::npos) << msg;
  nn::GPTConfig cfg = config_from_gpt2_file(dir / "hf.safetensors", {.n_head = 2});
  EXPECT_EQ(cfg.n_layer, 2);
  EXPECT_EQ(cfg.vocab_size, 50);
  EXPECT_EQ(cfg.padded_vocab_size, 0);
  auto b = std::make_shared<nn::GPT>(cfg);
  b->eval();
  load_gpt2(*b, dir / "hf.safetensors");
  Tensor ids = sample_ids(1, 9, 50);
  // b's head is a (50, C) table, m's a padded (64, C) one: the matmul may block differently,
  // so the logits agree to rounding, not bit for bit.
  auto lb = logits_of(*b, ids), lm = logits_of(*m, ids);
  ASSERT_EQ(lb.size(), lm.size());
  for (size_t i = 0; i < lb.size(); ++i) ASSERT_NEAR(lb[i], lm[i], 1e-5) << i;
}

// An untied LM head was dropped silently (the model scored with wte as its head), and a file
// without ln_f.bias was read as bias=false and reported as "every bias non-zero", ln_f.bias never named.
TEST(GPT2Format, AnUntiedHeadAndAMissingFinalNormBiasAreNamed) {
  TempDir dir;
  auto m = make_gpt(small_config(), 6);
  export_gpt2(*m, dir / "zdl.safetensors");
  const NamedTensors exported = [&] {
    NamedTensors out;
    for (auto& [n, t] : load_safetensors(dir / "zdl.safetensors").tensors) out.emplace_back(n, t);
    return out;
  }();
  auto write_with = [&](const std::function<void(NamedTensors&)>& edit) {
    NamedTensors t = exported;
    edit(t);
    save_safetensors(dir / "edited.safetensors", t);
    return dir / "edited.safetensors";
  };
  auto load = [&](const std::string& path) {
    auto b = std::make_shared<nn::GPT>(config_from_gpt2_file(path, {.n_head = 2}));
    load_gpt2(*b, path);
  };
  const Tensor wte = load_safetensors(dir / "zdl.safetensors").tensors.at("wte.weight");
  EXPECT_NO_THROW(load(write_with([&](NamedTensors& t) { t.emplace_back("lm_head.weight", wte); })));  // tied
  std::string msg = error_of([&] {
    load(write_with([&](NamedTensors& t) { t.emplace_back("lm_head.weight", mul(wte, 2.0)); }));
  });
  EXPECT_NE(msg.find("lm_head.weight differs from wte.weight (an untied LM head"), std::string::npos) << msg;
  msg = error_of([&] {
    load(write_with([&](NamedTensors& t) { std::erase_if(t, [](auto& kv) { return kv.first == "ln_f.bias"; }); }));
  });
  EXPECT_NE(msg.find("missing: ln_f.bias (the file's other biases"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("is non-zero but the model has bias=false"), std::string::npos) << msg;
}

TEST(GPT2Format, LoadRejectsAMismatchedModelListingEveryProblem) {
  TempDir dir;
  auto m = make_gpt(small_config(), 6);
  export_gpt2(*m, dir / "gpt2.safetensors");

  auto cfg = small_config();
  cfg.n_layer = 3;
  cfg.block_size = 8;
  auto other = make_gpt(cfg, 7);
  auto before = other->h[0]->attn->c_attn->weight.to_vector();
  std::string msg = error_of([&] { load_gpt2(*other, dir / "gpt2.safetensors"); });
  EXPECT_NE(msg.find("does not match the model (n_layer=3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: h.2.ln_1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: h.2.mlp.c_proj.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wpe.weight (expected [8,16], got [16,16])"), std::string::npos) << msg;
  EXPECT_EQ(other->h[0]->attn->c_attn->weight.to_vector(), before);  // nothing copied

  auto wide = small_config();
  wide.n_embd = 32;
  wide.n_layer = 1;
  auto w = make_gpt(wide, 8);
  msg = error_of([&] { load_gpt2(*w, dir / "gpt2.safetensors"); });
  EXPECT_NE(msg.find("h.0.attn.c_attn.weight (expected [32,96], got [16,48])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: h.1.ln_1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wte.weight (expected [50,32] or [64,32], got [50,16])"), std::string::npos) << msg;
}

TEST(GPT2Format, IntegerWeightsAndMetadataThatContradictsTheShapesAreRefused) {
  TempDir dir;
  auto m = make_gpt(small_config(), 9);
  export_gpt2(*m, dir / "gpt2.safetensors");
  const SafetensorsFile good = load_safetensors(dir / "gpt2.safetensors");
  auto rewrite = [&](const std::string& name, const std::function<void(NamedTensors&, Metadata&)>& edit) {
    NamedTensors t(good.tensors.begin(), good.tensors.end());
    Metadata meta = good.metadata;
    edit(t, meta);
    save_safetensors(dir / name, t, meta);
    return dir / name;
  };
  // I32 bits where a weight belongs: refused by both the config reader and the loader.
  const std::string ints = rewrite("ints.safetensors", [](NamedTensors& t, Metadata&) {
    for (auto& [n, x] : t)
      if (n == "h.0.mlp.c_fc.weight") x = x.to(DType::I32);
  });
  std::string msg = error_of([&] { config_from_gpt2_file(ints); });
  EXPECT_NE(msg.find("'h.0.mlp.c_fc.weight' is I32 (weights must be floating point"), std::string::npos) << msg;
  auto target = make_gpt(small_config(), 10);
  const auto before = target->h[0]->mlp->c_fc->weight.to_vector();
  msg = error_of([&] { load_gpt2(*target, ints); });
  EXPECT_NE(msg.find("h.0.mlp.c_fc.weight is i32 (weights must be floating point)"), std::string::npos) << msg;
  EXPECT_EQ(target->h[0]->mlp->c_fc->weight.to_vector(), before);  // nothing copied
  // Metadata that the shapes contradict.
  for (auto kv : {std::pair<std::string, std::string>{"n_layer", "3"}, {"n_embd", "32"}, {"block_size", "8"},
                  {"vocab_size", "65"}}) {
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    const std::string f = rewrite(key + ".safetensors", [&](NamedTensors&, Metadata& meta) { meta[key] = value; });
    msg = error_of([&] { config_from_gpt2_file(f); });
    EXPECT_NE(msg.find("metadata " + key + "=" + value), std::string::npos) << key << ": " << msg;
  }
  EXPECT_EQ(config_from_gpt2_file(dir / "gpt2.safetensors").n_layer, 2);  // the untouched file still reads
}

TEST(GPT2Format, BiasFreeModelsExportZeroBiases) {
  TempDir dir;
  auto cfg = small_config();
  cfg.bias = false;
  auto m = make_gpt(cfg, 9);
  export_gpt2(*m, dir / "nb.safetensors");
  SafetensorsFile f = load_safetensors(dir / "nb.safetensors");
  EXPECT_EQ(f.tensors.at("h.0.attn.c_attn.bias").to_vector(), std::vector<double>(48, 0.0));
  auto b = make_gpt(cfg, 10);
  load_gpt2(*b, dir / "nb.safetensors");
  Tensor ids = sample_ids(1, 5, 50);
  EXPECT_EQ(logits_of(*b, ids), logits_of(*m, ids));

  // Non-zero biases cannot go into a bias-free model.
  export_gpt2(*make_gpt(small_config(), 11), dir / "b.safetensors");
  std::string msg = error_of([&] { load_gpt2(*b, dir / "b.safetensors"); });
  EXPECT_NE(msg.find("ln_f.bias is non-zero but the model has bias=false"), std::string::npos) << msg;
}

// The reference reader: what a PyTorch user does with the file, with nothing but the
// standard library and torch. Runs GPT-2's forward pass in HF's Conv1D convention (x @ W + b).
static const char* kTorchReader = R"PY(
import json, math, struct, sys
import torch
import torch.nn.functional as F

def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop('__metadata__', {})
    dt = {'F32': torch.float32, 'F64': torch.float64, 'BF16': torch.bfloat16, 'F16': torch.float16,
          'I32': torch.int32, 'I64': torch.int64}
    out = {}
    for k, v in h.items():
        s, e = v['data_offsets']
        raw = bytearray(b[8 + n + s:8 + n + e])
        t = torch.frombuffer(raw, dtype=dt[v['dtype']]) if e > s else torch.empty(0, dtype=dt[v['dtype']])
        out[k] = t.reshape(v['shape'])
    return out, meta

sd, meta = load(sys.argv[1])
ref, _ = load(sys.argv[2])
L, C, NH = int(meta['n_layer']), int(meta['n_embd']), int(meta['n_head'])
names = {'wte.weight', 'wpe.weight', 'ln_f.weight', 'ln_f.bias'}
for i in range(L):
    for n in ['ln_1.weight', 'ln_1.bias', 'attn.c_attn.weight', 'attn.c_attn.bias', 'attn.c_proj.weight',
              'attn.c_proj.bias', 'ln_2.weight', 'ln_2.bias', 'mlp.c_fc.weight', 'mlp.c_fc.bias',
              'mlp.c_proj.weight', 'mlp.c_proj.bias']:
        names.add('h.%d.%s' % (i, n))
assert set(sd) == names, sorted(set(sd) ^ names)
assert list(sd['h.0.attn.c_attn.weight'].shape) == [C, 3 * C], sd['h.0.attn.c_attn.weight'].shape
# zdl's Linear weight is (3C, C): element [j, i] is the file's [i, j].
assert sd['h.0.attn.c_attn.weight'][1, 2 * C + 3].item() == ref['c_attn_w'][2 * C + 3, 1].item()

ids = ref['ids']
B, T = ids.shape
ln = lambda x, p: F.layer_norm(x, (C,), sd[p + '.weight'], sd[p + '.bias'], 1e-5)
x = sd['wte.weight'][ids] + sd['wpe.weight'][:T]
mask = torch.ones(T, T).tril().bool()
for i in range(L):
    p = 'h.%d.' % i
    q, k, v = (ln(x, p + 'ln_1') @ sd[p + 'attn.c_attn.weight'] + sd[p + 'attn.c_attn.bias']).split(C, dim=2)
    q, k, v = [t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v)]
    att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // NH)).masked_fill(~mask, float('-inf')).softmax(-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    x = x + y @ sd[p + 'attn.c_proj.weight'] + sd[p + 'attn.c_proj.bias']
    hid = F.gelu(ln(x, p + 'ln_2') @ sd[p + 'mlp.c_fc.weight'] + sd[p + 'mlp.c_fc.bias'], approximate='tanh')
    x = x + hid @ sd[p + 'mlp.c_proj.weight'] + sd[p + 'mlp.c_proj.bias']
logits = ln(x, 'ln_f') @ sd['wte.weight'].T
err = (logits - ref['logits']).abs().max().item()
assert err < 1e-4, 'max |torch - zdl| = %g' % err
print('torch reader OK, max abs diff %.3g' % err)
)PY";

TEST(GPT2Format, PyTorchReadsTheExportAndReproducesTheLogits) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    ZDL_SKIP_UNLESS_CI() << "/usr/bin/python3 with torch is not available (scripts/setup.sh installs python3-torch)";
  TempDir dir;
  auto m = make_gpt(small_config(), 12);
  export_gpt2(*m, dir / "gpt2.safetensors");
  Tensor ids = sample_ids(2, 11, 50);
  Tensor logits;
  {
    NoGradGuard ng;
    logits = m->logits(ids);
  }
  save_safetensors(dir / "ref.safetensors",
                   {{"ids", ids}, {"logits", logits}, {"c_attn_w", m->h[0]->attn->c_attn->weight}});
  std::ofstream(dir / "reader.py") << kTorchReader;
  const std::string out = dir / "out.txt";
  int rc = std::system(("/usr/bin/python3 " + (dir / "reader.py") + " " + (dir / "gpt2.safetensors") + " " +
                        (dir / "ref.safetensors") + " > " + out + " 2>&1")
                           .c_str());
  std::string log = testing::read_bytes(out);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("torch reader OK"), std::string::npos) << log;
}

}  // namespace zdl::io
