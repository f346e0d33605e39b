// Loading a HF tokenizer.json (+ tokenizer_config.json) into Tokenizer::Impl, validating every
// part and naming what is supported when a part is not.
// Over 500 lines on purpose: one Loader checks every part against the others (the model, the
// added tokens, the pre-tokenizer, normalizer, decoder and config), sharing its state and errors.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include <spdlog/spdlog.h>

#include "bestofn/util/error.h"
#include "bestofn/util/text_file.h"
#include "bestofn/util/utf8.h"
#include "util/json_file.h"
#include "tokenizer/json_fast_parse.h"
#include "tokenizer/tokenizer_impl.h"

namespace bestofn {
using nlohmann::json;

namespace {

using tokenizer_json::BulkParts;
using tokenizer_json::FastParse;
using tokenizer_json::split_merge;


struct Loader {
  Tokenizer::Impl& t;
  const std::string& file;

  Error fail(const std::string& what) const { return Error(file, what); }

  std::string str(const json& j, const char* key, const std::string& where) const {
    if (!j.contains(key) || !j[key].is_string()) throw fail(where + ": missing string \"" + key + "\"");
    return j[key].get<std::string>();
  }

  // Optional members: absent (or null) gives the default; a wrong type is an error naming the member.
  bool flag(const json& j, const char* key, bool fallback, const std::string& where) const {
    if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) throw fail(where + ": \"" + key + "\" must be true or false, got " + j[key].dump());
    return j[key].get<bool>();
  }

  std::string opt_str(const json& j, const char* key, const std::string& fallback, const std::string& where) const {
    if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
    return str(j, key, where);
  }

  int count(const json& j, const char* key, const std::string& where) const {  // 0 when absent
    if (!j.is_object() || !j.contains(key) || j[key].is_null()) return 0;
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 1000000)
      throw fail(where + ": \"" + key + "\" must be an integer from 0 to 1000000, got " + v.dump());
    return v.get<int>();
  }

  // {"pattern": {"String": "..."}} (or "Regex"), as the pattern of a normalizer, pre-tokenizer or decoder.
  std::string pattern(const json& j, const char* kind, const std::string& where) const {
    if (!j.contains("pattern") || !j["pattern"].is_object() || !j["pattern"].contains(kind) || !j["pattern"][kind].is_string())
      throw fail(where + ": only a " + kind + " pattern is supported");
    return j["pattern"][kind].get<std::string>();
  }

  // Why an id past the end is wrong, where the cause may be a token missing below it.
  static std::string id_rule(std::size_t n) {
    return " (the vocab's " + std::to_string(n) + " tokens must have the ids 0.." + std::to_string(n - 1) +
           ", each once: one missing below moves the top out of range)";
  }

  // The DOM's model.vocab and model.merges, for a file that FastParse did not take.
  void vocab_from_dom(const json& model, BulkParts& bulk) const {
    if (!model.contains("vocab") || !model["vocab"].is_object()) throw fail("model.vocab must be an object of token -> id");
    const json& v = model["vocab"];
    const std::size_t n = v.size();
    bulk.vocab.reserve(n);
    for (auto& [tok, id] : v.items()) {
      if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() >= static_cast<long long>(n))
        throw fail("model.vocab: id " + id.dump() + " of token " + json(tok).dump() + " is outside 0.." + std::to_string(n - 1) + id_rule(n));
      bulk.vocab.insert(tok, id.get<int>());
    }
  }

  void merges_from_dom(const json& model, BulkParts& bulk) const {
    if (!model.contains("merges") || !model["merges"].is_array()) throw fail("model.merges must be a list");
    const auto& m = model["merges"];
    bulk.merges.reserve(m.size());
    for (std::size_t rank = 0; rank < m.size(); ++rank) {
      if (m[rank].is_string()) {  // "a b"
        const auto& s = m[rank].get_ref<const std::string&>();
        if (!split_merge(s, bulk.merges))
          throw fail("model.merges[" + std::to_string(rank) + "]: " + json(s).dump() + " is not \"left right\"");
      } else if (m[rank].is_array() && m[rank].size() == 2 && m[rank][0].is_string() && m[rank][1].is_string()) {
        bulk.merges.emplace_back(m[rank][0].get<std::string>(), m[rank][1].get<std::string>());
      } else {
        throw fail("model.merges[" + std::to_string(rank) + "]: expected \"left right\" or [left, right], got " + m[rank].dump());
      }
    }
  }

  void vocab(BulkParts& bulk) {
    const std::size_t n = bulk.vocab.size();
    t.id_to_token.assign(n, std::string());
    std::vector<bool> seen(n, false);
    bulk.vocab.for_each([&](std::string_view tok, int id) {
      const auto i = static_cast<std::size_t>(id);
      if (i >= n)
        throw fail("model.vocab: id " + std::to_string(id) + " of token " + json(std::string(tok)).dump() + " is outside 0.." +
                   std::to_string(n - 1) + id_rule(n));
      if (seen[i]) throw fail("model.vocab: id " + std::to_string(i) + " is given to two tokens");
      seen[i] = true;
      t.id_to_token[i] = tok;
    });
    t.vocab = std::move(bulk.vocab);
  }

  // Three vocab lookups and one merge-table insert per merge, 280k merges for Llama 3, each a likely
  // cache miss: they go kAhead merges at a time, prefetching the slots of the block first.
  void merges(const BulkParts& bulk) {
    const auto& m = bulk.merges;
    t.merges.reserve(m.size());
    constexpr std::size_t kAhead = 16;
    std::array<std::string, kAhead> joined;
    std::array<std::array<std::uint64_t, 3>, kAhead> h{};
    std::array<std::array<int, 3>, kAhead> ids{};  // left, right, merged
    for (std::size_t base = 0; base < m.size(); base += kAhead) {
      const std::size_t nb = std::min(kAhead, m.size() - base);
      for (std::size_t i = 0; i < nb; ++i) {
        const auto& [a, b] = m[base + i];
        joined[i].assign(a).append(b);
        h[i] = {bpe::StringIds::hash(a), bpe::StringIds::hash(b), bpe::StringIds::hash(joined[i])};
        for (const std::uint64_t x : h[i]) t.vocab.prefetch(x);
      }
      for (std::size_t i = 0; i < nb; ++i) {
        const auto& [a, b] = m[base + i];
        const auto ia = t.vocab.find(a, h[i][0]), ib = t.vocab.find(b, h[i][1]), im = t.vocab.find(joined[i], h[i][2]);
        if (!ia || !ib || !im)
          throw fail("model.merges[" + std::to_string(base + i) + "]: " + json(a + " " + b).dump() + " uses a token missing from the vocab");
        ids[i] = {*ia, *ib, *im};
        t.merges.prefetch(*ia, *ib);
      }
      for (std::size_t i = 0; i < nb; ++i) t.merges.add(ids[i][0], ids[i][1], static_cast<int>(base + i), ids[i][2]);
    }
  }

  void model(const json& j, BulkParts& bulk) {
    if (!j.contains("model") || !j["model"].is_object()) throw fail("no \"model\" object");
    const json& m = j["model"];
    const std::string type = opt_str(m, "type", "BPE", "model");
    if (type != "BPE") throw fail("unsupported model type '" + type + "'; supported: BPE");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})  // "" adds nothing: as none (HF)
      if (const std::string v = opt_str(m, key, "", std::string("model.") + key); !v.empty())
        throw fail(std::string("model.") + key + " " + json(v).dump() + " is not supported (only none or \"\")");
    if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0) throw fail("BPE dropout is not supported");
    if (!bulk.vocab_given) vocab_from_dom(m, bulk);
    vocab(bulk);
    if (!bulk.merges_given) merges_from_dom(m, bulk);
    merges(bulk);
    t.ignore_merges = flag(m, "ignore_merges", false, "model");
    t.byte_fallback = flag(m, "byte_fallback", false, "model");
    t.fuse_unk = flag(m, "fuse_unk", false, "model");
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      const auto id = t.vocab.find(m["unk_token"].get_ref<const std::string&>());
      if (!id) throw fail("model.unk_token " + m["unk_token"].dump() + " is not in the vocab");
      t.unk_id = *id;
    }
  }

  void added_tokens(const json& j) {
    if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return;
    if (!j["added_tokens"].is_array()) throw fail("added_tokens must be a list");
    // Added tokens take vocabulary ids or the ids right after them: a bound that keeps a corrupt id
    // from sizing the id table.
    const long long max_id = static_cast<long long>(t.id_to_token.size() + j["added_tokens"].size());
    for (const auto& a : j["added_tokens"]) {
      AddedToken at;
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<long long>() < 0 ||
          a["id"].get<long long>() >= max_id)
        throw fail("added_tokens: entry " + a.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 80) +
                   " needs an integer id from 0 to " + std::to_string(max_id - 1) + " (the vocab size + the added tokens)");
      at.id = a["id"].get<int>();
      at.content = str(a, "content", "added_tokens");
      if (at.content.empty() || utf8::first_invalid(at.content)) throw fail("added_tokens: token " + std::to_string(at.id) + " has empty or invalid content");
      const std::string where = "added token " + std::to_string(at.id);
      at.special = flag(a, "special", false, where);
      at.lstrip = flag(a, "lstrip", false, where);
      at.rstrip = flag(a, "rstrip", false, where);
      at.single_word = flag(a, "single_word", false, where);
      if (static_cast<std::size_t>(at.id) >= t.id_to_token.size()) t.id_to_token.resize(static_cast<std::size_t>(at.id) + 1);
      t.id_to_token[static_cast<std::size_t>(at.id)] = at.content;
      t.vocab.assign(at.content, at.id);
      t.added_first_byte[static_cast<unsigned char>(at.content[0])] = true;
      t.added.push_back(std::move(at));
    }
    t.special.assign(t.id_to_token.size(), false);
    for (const auto& a : t.added) t.special[static_cast<std::size_t>(a.id)] = a.special;
  }

  void normalizer(const json& n) {
    if (n.is_null()) return;
    const std::string type = str(n, "type", "normalizer");
    if (type == "Sequence") {
      for (const auto& s : n.value("normalizers", json::array())) normalizer(s);
    } else if (type == "NFC") {  // Qwen2 / Qwen3
      t.normalizer.push_back({false, "", "", true});
    } else if (type == "Prepend") {
      t.normalizer.push_back({true, "", str(n, "prepend", "Prepend normalizer")});
    } else if (type == "Replace") {
      t.normalizer.push_back({false, pattern(n, "String", "Replace normalizer"), str(n, "content", "Replace normalizer")});
    } else {
      throw fail("unsupported normalizer '" + type + "'; supported: Sequence, NFC, Prepend, Replace");
    }
  }

  void add_regex(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw fail("pre_tokenizer regex does not compile at offset " + std::to_string(off) + ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // best effort: the interpreter gives the same matches
    t.pre_steps.push_back({PreStep::Split, Regex(re), "", PreStep::Always, true});
  }

  // Metaspace's replacement (one character) and prepend scheme, as HF reads them: prepend_scheme
  // "first" / "always" (the default) / "never", else the older add_prefix_space (true: always),
  // which must not contradict it; split defaults to true.
  PreStep metaspace(const json& p, const std::string& where) const {
    PreStep m{PreStep::Metaspace, nullptr, str(p, "replacement", where), PreStep::Always, flag(p, "split", true, where)};
    if (m.replacement.empty() || utf8::first_invalid(m.replacement) || utf8::sequence_length(m.replacement, 0) != m.replacement.size())
      throw fail(where + ": \"replacement\" must be one character, got " + json(m.replacement).dump());
    const std::string scheme = opt_str(p, "prepend_scheme", "always", where);
    if (scheme == "first") m.prepend = PreStep::First;
    else if (scheme == "never") m.prepend = PreStep::Never;
    else if (scheme != "always") throw fail(where + ": \"prepend_scheme\" must be \"first\", \"always\" or \"never\", got " + json(scheme).dump());
    if (!flag(p, "add_prefix_space", true, where) && m.prepend != PreStep::Never)
      throw fail(where + ": add_prefix_space false contradicts prepend_scheme \"" + scheme + "\"");
    return m;
  }

  void pre_tokenizer(const json& p) {
    if (p.is_null()) return;
    const std::string type = str(p, "type", "pre_tokenizer");
    // ByteLevel maps the bytes to its table's characters: a step after it would see those.
    if (t.byte_level) throw fail("pre_tokenizer " + type + " after ByteLevel is not supported (ByteLevel must be the last step)");
    if (type == "Sequence") {
      if (p.contains("pretokenizers") && !p["pretokenizers"].is_array()) throw fail("Sequence pre_tokenizer: \"pretokenizers\" must be a list");
      for (const auto& s : p.value("pretokenizers", json::array())) pre_tokenizer(s);
    } else if (type == "Split") {
      const std::string regex = pattern(p, "Regex", "Split pre_tokenizer");
      if (opt_str(p, "behavior", "", "Split pre_tokenizer") != "Isolated" || flag(p, "invert", false, "Split pre_tokenizer"))
        throw fail("Split pre_tokenizer: only behavior Isolated without invert is supported");
      add_regex(regex);
    } else if (type == "Digits") {  // HF: char::is_numeric (Unicode N*), each digit or each run its own piece
      add_regex(flag(p, "individual_digits", false, "Digits pre_tokenizer") ? R"(\p{N})" : R"(\p{N}+)");
    } else if (type == "ByteLevel") {
      if (flag(p, "add_prefix_space", true, "ByteLevel pre_tokenizer")) t.pre_steps.push_back({PreStep::PrefixSpace, nullptr, "", PreStep::Always, true});
      if (flag(p, "use_regex", true, "ByteLevel pre_tokenizer"))  // GPT-2's own split
        add_regex(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
      t.byte_level = true;
    } else if (type == "Metaspace") {
      t.pre_steps.push_back(metaspace(p, "Metaspace pre_tokenizer"));
    } else {
      throw fail("unsupported pre_tokenizer '" + type + "'; supported: Sequence, Split, Digits, ByteLevel, Metaspace");
    }
  }

  void decoder(const json& d) {
    if (d.is_null()) return;
    const std::string type = str(d, "type", "decoder");
    if (type == "Sequence") {
      for (const auto& s : d.value("decoders", json::array())) decoder(s);
    } else if (type == "ByteLevel") {
      t.decoder.push_back({DecodeStep::ByteLevel, "", "", ' ', 0, 0});
    } else if (type == "Replace") {
      t.decoder.push_back({DecodeStep::Replace, pattern(d, "String", "Replace decoder"), str(d, "content", "Replace decoder"), ' ', 0, 0});
    } else if (type == "ByteFallback") {
      t.decoder.push_back({DecodeStep::ByteFallback, "", "", ' ', 0, 0});
    } else if (type == "Fuse") {
      t.decoder.push_back({DecodeStep::Fuse, "", "", ' ', 0, 0});
    } else if (type == "Metaspace") {
      if (std::any_of(t.decoder.begin(), t.decoder.end(), [](const DecodeStep& s) { return s.kind == DecodeStep::Fuse; }))
        throw fail("Metaspace decoder after Fuse is not supported");
      const PreStep m = metaspace(d, "Metaspace decoder");
      DecodeStep step{DecodeStep::Metaspace, m.replacement, " ", ' ', 0, 0};
      step.drop_first = m.prepend != PreStep::Never;
      t.decoder.push_back(step);
    } else if (type == "Strip") {
      const std::string c = str(d, "content", "Strip decoder");
      if (c.size() != 1) throw fail("Strip decoder: content must be one ASCII character");
      t.decoder.push_back({DecodeStep::Strip, "", "", c[0], count(d, "start", "Strip decoder"), count(d, "stop", "Strip decoder")});
    } else {
      throw fail("unsupported decoder '" + type + "'; supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace");
    }
  }

  // The byte-level table's token for each byte, and the <0xNN> tokens. A byte-level vocabulary may
  // lack some bytes (SmolLM2 lacks 21): HF encodes such a byte as the unk token, or drops it.
  void byte_tables() {
    t.byte_ids.fill(-1);
    t.fallback_ids.fill(-1);
    std::string missing;
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      if (const auto id = t.vocab.find(buf)) t.fallback_ids[static_cast<std::size_t>(b)] = *id;
      if (!t.byte_level) continue;
      std::string key;
      utf8::append(key, byte_to_unicode()[static_cast<std::size_t>(b)]);
      if (const auto id = t.vocab.find(key)) {
        t.byte_ids[static_cast<std::size_t>(b)] = *id;
      } else if (++t.missing_bytes <= 8) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(b);
      }
    }
    if (t.missing_bytes > 0)
      spdlog::warn("{}: the byte-level vocab has no token for {} of the 256 bytes ({}{}); as in HF, such a byte is encoded as {}", file,
                   t.missing_bytes, missing, t.missing_bytes > 8 ? ", ..." : "",
                   t.unk_id ? "the unk token" : "nothing (dropped: there is no unk token)");
  }

  // The ids of the template's special token `name`: its entry in the processor's special_tokens
  // (what HF adds), else (a template without that map) the vocab's token of that name.
  std::vector<int> template_ids(const json& proc, const std::string& name) const {
    const std::string where = "post_processor TemplateProcessing";
    const auto vocab_n = static_cast<long long>(t.id_to_token.size());
    if (!proc.contains("special_tokens")) {
      const auto id = t.vocab.find(name);
      if (!id) throw fail(where + ": special token " + json(name).dump() + " is not in the vocab");
      return {*id};
    }
    const json& map = proc["special_tokens"];
    if (!map.is_object() || !map.contains(name))
      throw fail(where + ": special token " + json(name).dump() + " is missing from its special_tokens");
    const json& entry = map[name];
    if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array() || entry["ids"].empty())
      throw fail(where + ": special_tokens[" + json(name).dump() + "] needs a non-empty list \"ids\"");
    std::vector<int> ids;
    for (const json& v : entry["ids"]) {
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() >= vocab_n)
        throw fail(where + ": special_tokens[" + json(name).dump() + "].ids: " + v.dump() + " is not an id in 0.." +
                   std::to_string(vocab_n - 1));
      ids.push_back(v.get<int>());
    }
    return ids;
  }

  // The post-processor's template (what HF adds with add_special_tokens): BOS is the special
  // token it puts before the text. Without a template, BOS is tokenizer_config's bos_token.
  void specials(const json& j, const json& config, const std::string& config_file) {
    const json& post = j.contains("post_processor") ? j["post_processor"] : json();
    std::vector<const json*> procs;
    if (post.is_object() && opt_str(post, "type", "", "post_processor") == "Sequence" && post.contains("processors") && post["processors"].is_array())
      for (const auto& p : post["processors"]) procs.push_back(&p);
    else if (post.is_object())
      procs.push_back(&post);
    for (const json* p : procs) {
      if (!p->is_object() || opt_str(*p, "type", "", "post_processor") != "TemplateProcessing") continue;
      const std::string where = "post_processor TemplateProcessing";
      if (!p->contains("single") || !(*p)["single"].is_array()) throw fail(where + ": \"single\" must be a list");
      std::vector<int> before, after;
      bool text = false;
      for (const json& piece : (*p)["single"]) {
        if (piece.is_object() && piece.contains("Sequence")) {
          text = true;
          continue;
        }
        if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object() ||
            !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string())
          throw fail(where + ": a piece of \"single\" is neither {\"Sequence\": ...} nor {\"SpecialToken\": {\"id\": NAME}}: " +
                     piece.dump());
        for (int id : template_ids(*p, piece["SpecialToken"]["id"].get<std::string>())) (text ? after : before).push_back(id);
      }
      t.has_template = true;
      t.template_before = std::move(before);
      t.template_after = std::move(after);
      t.bos.reset();
      if (t.template_before.size() == 1) t.bos = t.template_before[0];
    }
    if (config.is_null()) return;
    if (!config.is_object()) throw Error(config_file, "must be a JSON object (HF's tokenizer_config.json)");
    // bos_token / eos_token: a token's text or an AddedToken {"content": ...}, or null (none); a
    // token that tokenizer.json lacks is an error (it would be no BOS, or no EOS to stop on, silently).
    auto named_token = [&](const char* key) -> std::optional<int> {
      if (!config.contains(key) || config[key].is_null()) return std::nullopt;
      const json& v = config[key];
      const bool ok = v.is_string() || (v.is_object() && v.contains("content") && v["content"].is_string());
      if (!ok) throw Error(config_file, std::string("\"") + key + "\" must be a token's text or {\"content\": text}, got " + v.dump());
      const std::string text = v.is_string() ? v.get<std::string>() : v["content"].get<std::string>();
      if (text.empty()) return std::nullopt;
      const auto id = t.vocab.find(text);
      if (!id) throw Error(config_file, std::string("\"") + key + "\" is " + json(text).dump() + ", which is not a token of " + file);
      return id;
    };
    if (auto b = named_token("bos_token"); !t.has_template) t.bos = b;
    t.eos = named_token("eos_token");
    if (!t.has_template) {  // transformers' Llama tokenizers build the template from these flags
      if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean() && config["add_bos_token"].get<bool>() && t.bos)
        t.template_before = {*t.bos};
      if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean() && config["add_eos_token"].get<bool>() && t.eos)
        t.template_after = {*t.eos};
    }
    // chat_template: a Jinja text, or HF's named templates [{"name", "template"}, ...], of which
    // chat formats are chosen from the one named "default" (as HF does without a name).
    if (config.contains("chat_template") && !config["chat_template"].is_null()) {
      const json& c = config["chat_template"];
      if (c.is_string()) {
        t.chat_template = c.get<std::string>();
      } else if (c.is_array()) {
        for (const json& named : c) {
          if (!named.is_object() || !named.contains("name") || !named["name"].is_string() || !named.contains("template") ||
              !named["template"].is_string())
            throw Error(config_file, "\"chat_template\" as a list must hold {\"name\": text, \"template\": text} objects, got " + named.dump());
          if (named["name"] == "default") t.chat_template = named["template"].get<std::string>();
        }
      } else {
        throw Error(config_file, "\"chat_template\" must be a text or a list of {\"name\", \"template\"}, got " + std::string(c.type_name()));
      }
    }
  }
};

}  // namespace

void Tokenizer::Impl::load(const std::string& tokenizer_json, const std::string* config_path) {
  path = tokenizer_json;
  const std::string text = read_text_file(tokenizer_json);
  if (text.size() > std::numeric_limits<std::uint32_t>::max()) throw Error(tokenizer_json, "is larger than 4 GB");
  BulkParts bulk;
  json j;
  {
    FastParse fast;
    bool fast_ok = false;
    try {
      fast_ok = json::sax_parse(text, &fast);  // strict: true only once every container has closed
    } catch (const std::exception&) {  // declined like any other surprise: the DOM parse reports
    }
    if (fast_ok) {
      j = std::move(fast.root);
      bulk = std::move(fast.bulk);
    }
  }  // a declined parse's partial results are freed before the DOM parse
  if (j.is_null()) j = parse_json_text(text, tokenizer_json, /*repeated_keys=*/true);  // (as HF: the last value wins)
  if (!j.is_object()) throw Error(tokenizer_json, "must be a JSON object");
  Loader ld{*this, path};
  ld.model(j, bulk);
  ld.added_tokens(j);
  if (special.size() < id_to_token.size()) special.resize(id_to_token.size(), false);
  ld.normalizer(j.value("normalizer", json()));
  ld.pre_tokenizer(j.value("pre_tokenizer", json()));
  ld.decoder(j.value("decoder", json()));
  ld.byte_tables();
  vocab.for_each([this](std::string_view tok, int id) {  // keys live in `vocab`, which is not modified after load
    if (!tok.empty() && utf8::sequence_length(tok, 0) == tok.size()) char_ids.emplace(tok, id);
  });
  json config;
  if (config_path) config = read_json_file(*config_path);
  ld.specials(j, config, config_path ? *config_path : std::string());

  // Per-token raw bytes for the incremental decoder; the Strip step applies to whole text only.
  token_bytes.resize(id_to_token.size());
  for (std::size_t id = 0; id < id_to_token.size(); ++id) token_bytes[id] = raw_bytes(id_to_token[id]);
  for (const auto& s : decoder)
    if (s.kind == DecodeStep::Strip) strip_leading = s.strip_start;
}

}  // namespace bestofn
