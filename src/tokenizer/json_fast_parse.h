#pragma once
// The one-pass read of tokenizer.json (for tokenizer_json.cpp only): model.vocab and model.merges go
// straight into BulkParts, everything else into a JSON DOM.
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"

namespace bestofn::tokenizer_json {
using nlohmann::json;

// model.vocab and model.merges: the bulk of a tokenizer.json (Llama 3: 128k tokens, 280k merges).
struct BulkParts {
  bool vocab_given = false, merges_given = false;
  bpe::StringIds vocab;  // token -> the id as given (Loader::vocab checks the ids)
  std::vector<std::pair<std::string, std::string>> merges;
};

// A merge written "left right" (one space, neither side empty) appended to `out`; false otherwise.
inline bool split_merge(const std::string& s, std::vector<std::pair<std::string, std::string>>& out) {
  const auto sp = s.find(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos) return false;
  out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  return true;
}

// One pass over tokenizer.json that builds a DOM of everything but model.vocab and model.merges,
// which go straight into BulkParts: their 128k map nodes and 280k strings were most of the load
// time. It takes only the usual shapes ({token: id} with ids that fit an int, and "a b" or [a, b]
// merges, each given once); on anything else, and on invalid JSON, it stops, and the loader parses
// the text again into a DOM whose checks name the problem.
class FastParse {
 public:
  json root;
  BulkParts bulk;

  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }  // negative: never an id
  bool number_unsigned(json::number_unsigned_t v) {
    if (mode_ == Mode::Vocab)
      return v <= static_cast<json::number_unsigned_t>(std::numeric_limits<int>::max()) && bulk.vocab.insert(key_, static_cast<int>(v));
    return value(json(v));
  }
  bool number_float(json::number_float_t v, const std::string&) { return value(json(v)); }
  bool string(std::string& v) {
    if (mode_ == Mode::Merges) return split_merge(v, bulk.merges);  // "left right"
    if (mode_ == Mode::Pair) {  // [left, right]
      if (pair_n_ == 2) return false;
      (pair_n_++ == 0 ? pair_.first : pair_.second) = v;
      return true;
    }
    return value(json(v));
  }
  bool binary(json::binary_t& v) { return value(json(std::move(v))); }
  bool key(std::string& k) {
    if (mode_ != Mode::Dom && mode_ != Mode::Vocab) return false;
    // A repeated vocab or merges key: the DOM keeps the last value, whatever its type.
    if (mode_ == Mode::Dom && at_model() && ((k == "vocab" && bulk.vocab_given) || (k == "merges" && bulk.merges_given))) return false;
    key_ = k;
    return true;
  }
  bool start_object(std::size_t) {
    if (mode_ != Mode::Dom) return false;
    if (at_model() && key_ == "vocab") return enter_bulk(bulk.vocab_given, Mode::Vocab);
    const bool is_model = stack_.size() == 1 && stack_[0]->is_object() && key_ == "model";
    json* o = open(json::object());
    if (is_model) {
      if (model_) return false;  // "model" twice: the DOM keeps the last one
      model_ = o;
    }
    return true;
  }
  bool end_object() {
    if (mode_ == Mode::Vocab) mode_ = Mode::Dom;
    else stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    if (mode_ == Mode::Merges) {
      mode_ = Mode::Pair;
      pair_n_ = 0;
      return true;
    }
    if (mode_ != Mode::Dom) return false;
    if (at_model() && key_ == "merges") return enter_bulk(bulk.merges_given, Mode::Merges);
    open(json::array());
    return true;
  }
  bool end_array() {
    if (mode_ == Mode::Pair) {
      if (pair_n_ != 2) return false;
      bulk.merges.push_back(std::move(pair_));
      pair_ = {};
      mode_ = Mode::Merges;
    } else if (mode_ == Mode::Merges) {
      mode_ = Mode::Dom;
    } else {
      stack_.pop_back();
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  enum class Mode { Dom, Vocab, Merges, Pair };
  bool at_model() const { return model_ && model_->is_object() && !stack_.empty() && stack_.back() == model_; }
  bool enter_bulk(bool& given, Mode mode) {
    if (given) return false;  // given twice: the DOM keeps the last one
    given = true;
    mode_ = mode;
    return true;
  }
  // Puts a value where the DOM parser would: the root, the end of the open array, or the pending
  // key of the open object (the last of repeated keys wins, as there).
  json* place(json&& v) {
    if (stack_.empty()) return &(root = std::move(v));
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    return &(top[key_] = std::move(v));
  }
  bool value(json&& v) {
    if (mode_ != Mode::Dom) return false;
    place(std::move(v));
    return true;
  }
  json* open(json&& container) {
    json* c = place(std::move(container));
    stack_.push_back(c);
    return c;
  }

  Mode mode_ = Mode::Dom;
  std::vector<json*> stack_;  // the open containers (their addresses are stable while open)
  std::string key_;
  const json* model_ = nullptr;
  std::pair<std::string, std::string> pair_;
  int pair_n_ = 0;
};

}  // namespace bestofn::tokenizer_json
