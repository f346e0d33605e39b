// bestofn tokenize / detokenize's flags; the work is run_tokenize / run_detokenize
// (bestofn/tokenizer/run_tokenize.h).
#include <memory>

#include "bestofn/tokenizer/run_tokenize.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/validators.h"

namespace bestofn::cli {

Runner add_tokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  sub->footer(
      "The whole input is encoded byte for byte (a trailing newline is part of the text).\n"
      "Examples:\n"
      "  printf 'def add(a, b):' | bestofn tokenize --tokenizer ~/models/Llama-3.1-8B\n"
      "  bestofn tokenize --tokenizer tokenizer.json --chat --system 'Be terse.' question.txt");
  sub->add_option("--tokenizer", opt->tokenizer, "tokenizer.json, or a model directory holding it")->required()->check(non_empty());
  sub->add_option("FILE", opt->input, "Text file (UTF-8, may be .gz); - for stdin")->default_str("-");
  sub->add_flag("--bos", opt->bos, "Add the special tokens HF adds by default: the tokenizer's post-processor template (BOS for Llama models; off by default; --chat templates carry their own)");
  auto* chat = sub->add_flag("--chat", opt->chat, "Wrap the text as one user turn in the chat template");
  add_chat_template_flags(sub, chat, opt->chat_format, opt->chat_template);
  sub->add_option("--system", opt->system, "System message for --chat")->needs(chat)->check(utf8_text());
  return [opt] { return run_tokenize(*opt); };
}

Runner add_detokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  auto* sub = app.add_subcommand("detokenize", "Print the text of a JSON array of token ids, exactly");
  sub->footer(
      "The text is written as is, with no newline added. Special tokens are kept.\n"
      "Example:\n"
      "  echo '[9906, 1917]' | bestofn detokenize --tokenizer ~/models/Llama-3.1-8B");
  sub->add_option("--tokenizer", opt->tokenizer, "tokenizer.json, or a model directory holding it")->required()->check(non_empty());
  sub->add_option("FILE", opt->input, "JSON array of ids; - for stdin")->default_str("-");
  return [opt] { return run_detokenize(*opt); };
}

}  // namespace bestofn::cli
