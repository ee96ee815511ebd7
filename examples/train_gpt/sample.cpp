#include "examples/train_gpt/sample.h"

#include <cstdio>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "nn/sampling.h"

namespace zdl::train_gpt {

namespace {

// A sample as text: each id's bytes, and <|id|> for an id beyond the tokenizer's vocabulary (a
// model's can be larger: --vocab-size, a checkpoint's).
std::string sample_text(const data::BpeTokenizer& tok, const std::vector<int64_t>& ids) {
  std::string text;
  for (int64_t id : ids) text += id < tok.vocab_size() ? tok.decode({id}) : detail::str("<|", id, "|>");
  return text;
}

// With a tokenizer a sample starts a document, as the shards' documents do: <|endoftext|> (not
// printed), then the prompt (none by default).
std::vector<int64_t> prompt_ids(const Args& a, const CLI::App& app, const std::optional<data::BpeTokenizer>& tok) {
  if (!tok) return data::ByteTokenizer().encode(a.prompt);
  std::vector<int64_t> prompt;
  if (tok->eot_id()) prompt.push_back(*tok->eot_id());
  const std::vector<int64_t> text = tok->encode(given(app, "--prompt") ? a.prompt : "");
  prompt.insert(prompt.end(), text.begin(), text.end());
  return prompt;
}

}  // namespace

void print_sample(Session& x, const CLI::App& app) {
  const Args& a = x.a;
  const std::optional<data::BpeTokenizer>& tok = x.s.tok;
  // The text of ids, written whole (a byte-level sample may hold a 0 byte, where %s would stop).
  auto write = [&](const std::vector<int64_t>& ids) {
    const std::string text = tok ? sample_text(*tok, ids) : data::ByteTokenizer().decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
  };
  std::vector<int64_t> prompt = prompt_ids(a, app, tok);
  if (x.lead()) {
    std::printf("---- sample (%lld %s, temperature %.2f, top-k %lld) ----\n", static_cast<long long>(a.sample),
                tok ? "tokens" : "bytes", a.temperature, static_cast<long long>(a.top_k));
    // The prompt, then each token as it is drawn: a long sample shows its progress.
    write(tok && tok->eot_id() ? std::vector<int64_t>(prompt.begin() + 1, prompt.end()) : prompt);
    std::fflush(stdout);
  }
  nn::generate(x.model, std::move(prompt),
               {.max_new_tokens = a.sample, .temperature = a.temperature, .top_k = a.top_k, .seed = a.seed,
                .on_token = [&](int64_t id) {
                  if (!x.lead()) return;
                  write({id});
                  std::fflush(stdout);
                }});
  if (x.lead()) std::printf("\n----\n");
}

}  // namespace zdl::train_gpt
