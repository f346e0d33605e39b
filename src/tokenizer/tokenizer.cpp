// Encoding and decoding (the loading is in tokenizer_json.cpp).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

#include "bestofn/util/error.h"
#include "bestofn/util/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace bestofn {
namespace {

constexpr std::size_t kMaxCachedPiece = 128;
constexpr std::size_t kMaxCacheEntries = 1 << 16;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  for (std::size_t j; (j = s.find(from, i)) != std::string::npos; i = j + from.size()) out.append(s, i, j - i).append(to);
  out.append(s, i, std::string::npos);
  s = std::move(out);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int>& out) const {
  const bool cacheable = piece.size() <= kMaxCachedPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(std::string(piece)); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> ids;
  if (ignore_merges) {  // a piece that is a whole token is taken as is (Llama 3)
    std::optional<int> id;
    if (byte_level) {
      std::string mapped;
      for (unsigned char b : piece) utf8::append(mapped, byte_to_unicode()[b]);
      id = vocab.find(mapped);
    } else {
      id = vocab.find(piece);
    }
    if (id) ids.push_back(*id);
  }
  if (ids.empty()) {
    start_symbols(piece, ids);
    bpe::merge(ids, merges);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::move(ids));
  }
}

void Tokenizer::Impl::start_symbols(std::string_view piece, std::vector<int>& ids) const {
  std::optional<int> unk;  // the pending unk token, as HF's merge_word holds it
  auto symbol = [&](std::string_view sym, int id) {
    if (id >= 0) {
      if (unk) ids.push_back(*unk);
      unk.reset();
      ids.push_back(id);
      return;
    }
    if (byte_fallback && std::all_of(sym.begin(), sym.end(), [&](char c) { return fallback_ids[static_cast<unsigned char>(c)] >= 0; })) {
      for (char c : sym) ids.push_back(fallback_ids[static_cast<unsigned char>(c)]);  // (a pending unk stays pending, as in HF)
      return;
    }
    if (!unk_id) return;  // no token for it: HF drops it
    if (unk && !fuse_unk) ids.push_back(*unk);
    unk = unk_id;
  };
  if (byte_level) {
    std::string mapped;
    for (unsigned char b : piece) {
      if (byte_ids[b] >= 0) {
        symbol({}, byte_ids[b]);
      } else {
        mapped.clear();
        utf8::append(mapped, byte_to_unicode()[b]);
        symbol(mapped, -1);
      }
    }
  } else {
    for (std::size_t i = 0; i < piece.size();) {
      const std::size_t n = std::max<std::size_t>(1, utf8::sequence_length(piece, i));
      const std::string_view sym = piece.substr(i, n);
      const auto it = char_ids.find(sym);
      symbol(sym, it == char_ids.end() ? -1 : it->second);
      i += n;
    }
  }
  if (unk) ids.push_back(*unk);
}

void Tokenizer::Impl::encode_segment(std::string_view text, bool at_start, std::vector<int>& out) const {
  if (text.empty()) return;
  std::string normalized;
  const bool normalize = !normalizer.empty();
  if (normalize) {
    normalized.assign(text);
    for (const auto& step : normalizer) {
      if (step.nfc) normalized = nfc(normalized);
      else if (step.prepend) normalized.insert(0, step.to);  // the segment is non-empty
      else replace_all(normalized, step.from, step.to);
    }
  }
  std::forward_list<std::string> owned;
  for (std::string_view p : pre_tokenize(normalize ? std::string_view(normalized) : text, at_start, owned)) encode_piece(p, out);
}

std::string Tokenizer::Impl::raw_bytes(const std::string& token, bool first) const {
  std::string t = token;
  for (const auto& s : decoder) {
    if (s.kind == DecodeStep::Replace || s.kind == DecodeStep::Metaspace) {
      replace_all(t, s.from, first && s.drop_first ? std::string() : s.to);
    } else if (s.kind == DecodeStep::ByteFallback && t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
               std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {  // as decode()
      t = std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    } else if (s.kind == DecodeStep::ByteLevel) {
      if (auto bytes = byte_level_bytes(t)) t = std::move(*bytes);  // else HF keeps the token's own bytes
    }
  }
  return t;
}

std::string Tokenizer::Impl::decode(std::span<const int> ids) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= id_to_token.size())
      throw Error(path, "id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(id_to_token.size() - 1) + ")");
    toks.push_back(id_to_token[static_cast<std::size_t>(id)]);
  }
  for (const auto& s : decoder) {
    switch (s.kind) {
      case DecodeStep::Replace:
        for (auto& t : toks) replace_all(t, s.from, s.to);
        break;
      case DecodeStep::Metaspace:  // as Replace, but the first token loses its replacements when drop_first
        for (std::size_t i = 0; i < toks.size(); ++i) replace_all(toks[i], s.from, i == 0 && s.drop_first ? std::string() : s.to);
        break;
      case DecodeStep::ByteLevel: {  // all tokens to bytes, then one lossy UTF-8 string
        std::string bytes;
        for (const auto& t : toks) {
          auto b = byte_level_bytes(t);
          bytes += b ? *b : t;
        }
        toks.assign(1, utf8::lossy(bytes));
        break;
      }
      case DecodeStep::ByteFallback: {  // a run of <0xNN> tokens: its text if valid, else one U+FFFD per byte
        std::vector<std::string> out;
        std::string run;
        auto flush = [&] {
          if (run.empty()) return;
          if (!utf8::first_invalid(run)) out.push_back(run);
          else for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back(utf8::kReplacement);
          run.clear();
        };
        for (auto& t : toks) {
          if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
              std::isxdigit(static_cast<unsigned char>(t[4]))) {
            run += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        toks = std::move(out);
        break;
      }
      case DecodeStep::Fuse: {
        std::string all;
        for (const auto& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case DecodeStep::Strip:
        for (auto& t : toks) {
          std::size_t a = 0, b = t.size();
          while (a < b && static_cast<int>(a) < s.strip_start && t[a] == s.strip_char) ++a;
          for (int k = 0; k < s.strip_stop && b > a && t[b - 1] == s.strip_char; ++k) --b;
          t = t.substr(a, b - a);
        }
        break;
    }
  }
  std::string text;
  for (const auto& t : toks) text += t;
  return text;
}

}  // namespace bestofn

namespace bestofn {
namespace {

// Leftmost-longest added token at or after `from`: (start, end, token), with lstrip/rstrip
// widening the match over whitespace. nullptr token when none is left.
struct AddedMatch {
  std::size_t begin, end;
  const AddedToken* token;
};

bool word_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

AddedMatch next_added(const Tokenizer::Impl& t, std::string_view text, std::size_t from) {
  for (std::size_t i = from; i < text.size(); ++i) {
    if (!t.added_first_byte[static_cast<unsigned char>(text[i])]) continue;
    const AddedToken* best = nullptr;
    for (const auto& a : t.added) {
      if ((!best || a.content.size() > best->content.size()) && text.compare(i, a.content.size(), a.content) == 0) {
        const std::size_t e = i + a.content.size();
        if (a.single_word && ((i > 0 && word_char(static_cast<unsigned char>(text[i - 1]))) ||
                              (e < text.size() && word_char(static_cast<unsigned char>(text[e])))))
          continue;
        best = &a;
      }
    }
    if (!best) continue;
    std::size_t b = i, e = i + best->content.size();
    if (best->lstrip)
      while (b > from && is_space(text[b - 1])) --b;
    if (best->rstrip)
      while (e < text.size() && is_space(text[e])) ++e;
    return {b, e, best};
  }
  return {text.size(), text.size(), nullptr};
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const fs::path json_path = dir ? path / "tokenizer.json" : path;
  if (!fs::exists(json_path, ec)) throw Error(json_path.string(), dir ? "missing (the directory has no tokenizer.json)" : "no such file");
  const fs::path config = json_path.parent_path() / "tokenizer_config.json";
  const std::string config_s = config.string();
  auto impl = std::make_unique<Impl>();
  impl->load(json_path.string(), fs::exists(config, ec) ? &config_s : nullptr);
  return Tokenizer(std::move(impl));
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_bos) const {
  if (auto bad = utf8::first_invalid(text)) throw Error("input text is not valid UTF-8 at byte " + std::to_string(*bad));
  std::vector<int> ids;
  const Impl& t = *impl_;
  if (add_bos) ids = t.template_before;
  for (std::size_t pos = 0; pos <= text.size();) {
    const AddedMatch m = next_added(*impl_, text, pos);
    impl_->encode_segment(text.substr(pos, m.begin - pos), pos == 0, ids);
    if (!m.token) break;
    ids.push_back(m.token->id);
    pos = m.end;
  }
  if (add_bos) ids.insert(ids.end(), t.template_after.begin(), t.template_after.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const { return impl_->decode(ids); }

const std::string& Tokenizer::token_bytes(int id) const {
  if (id < 0 || id >= vocab_size()) throw Error(impl_->path, "id " + std::to_string(id) + " is outside the vocabulary");
  return impl_->token_bytes[static_cast<std::size_t>(id)];
}

std::string Tokenizer::first_token_bytes(int id) const {
  const std::string& bytes = token_bytes(id);
  const bool drops = std::any_of(impl_->decoder.begin(), impl_->decoder.end(), [](const DecodeStep& s) { return s.drop_first; });
  return drops ? impl_->raw_bytes(impl_->id_to_token[static_cast<std::size_t>(id)], true) : bytes;
}

int Tokenizer::strip_leading_spaces() const { return impl_->strip_leading; }
int Tokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }

std::optional<int> Tokenizer::token_id(std::string_view token) const {
  return impl_->vocab.find(token);
}

std::string Tokenizer::token(int id) const {
  if (id < 0 || id >= vocab_size()) throw Error(impl_->path, "id " + std::to_string(id) + " is outside the vocabulary");
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(int id) const { return id >= 0 && id < vocab_size() && impl_->special[static_cast<std::size_t>(id)]; }
std::optional<int> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int> Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::byte_level() const { return impl_->byte_level; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::string& Tokenizer::path() const { return impl_->path; }

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tok, bool at_start)
    : tok_(tok), strip_left_(at_start ? tok.strip_leading_spaces() : 0), first_(at_start) {}

std::string IncrementalDecoder::push(int id) {
  pending_ += first_ ? tok_.first_token_bytes(id) : tok_.token_bytes(id);
  first_ = false;
  while (strip_left_ > 0 && !pending_.empty()) {
    if (pending_[0] != ' ') {
      strip_left_ = 0;
      break;
    }
    pending_.erase(0, 1);
    --strip_left_;
  }
  const std::size_t keep = utf8::incomplete_tail(pending_);
  std::string out = utf8::lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string IncrementalDecoder::finish() {
  std::string out = utf8::lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace bestofn
