#pragma once
// What `eval` sends a model for a benchmark problem, where generation stops and what code is
// judged, in one of two styles (--prompt-style):
//   bestofn   bestofn's own (the default): base models continue the prompt (MBPP: EvalPlus's
//             docstring form); chat models are asked in the user turn for one ```python block;
//             stop strings and extraction as extract.h says.
//   evalplus  EvalPlus 0.3.1's (evalplus/codegen.py, evalplus/provider/{utility,hf,vllm}.py), the
//             prompts of the EvalPlus leaderboard:
//     base    the task prompt stripped, plus "\n"; stop strings kEvalplusEos and, for HumanEval,
//             "\ndef ", "\nclass ", "\nimport ", "\nfrom ", "\nassert ", for MBPP '\n"""', "\nassert";
//             the code judged: sanitize(prompt + completion) (sanitize.h).
//     chat    the user turn kEvalplusInstructionPrefix + "\n```\n" + the task prompt stripped +
//             "\n```\n", and the assistant turn begun with kEvalplusResponsePrefix + "\n```python\n"
//             (render_prefilled: [user, assistant] rendered without a generation prompt and cut at
//             EvalPlus's marker); the rendered text is encoded as any prompt text is, with the
//             tokenizer's own special tokens (EvalPlus's tokenizer.encode and vLLM's generate do
//             so: a template that writes BOS then has two, as there); stop strings kEvalplusEos and
//             "\n```\n"; the code judged: sanitize(the reply).
//     Both: EvalPlus's providers turn each tab of the output into four spaces before sanitizing.
#include <string>
#include <vector>

#include "bestofn/eval/datasets.h"
#include "bestofn/generate/model_options.h"

namespace bestofn {

enum class PromptStyle { Bestofn, Evalplus };
inline constexpr const char* kPromptStyles = "bestofn, evalplus";

// "bestofn" or "evalplus"; anything else is an Error naming --prompt-style.
PromptStyle parse_prompt_style(const std::string& name);
const char* prompt_style_name(PromptStyle style);

// EvalPlus 0.3.1's texts: run_codegen's instruction and response prefixes, make_raw_chat_prompt's
// splitter, and the stop strings every model gets (evalplus/provider/utility.py's EOS).
inline constexpr const char* kEvalplusInstructionPrefix =
    "Please provide a self-contained Python script that solves the following problem in a markdown code block:";
inline constexpr const char* kEvalplusResponsePrefix =
    "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:";
inline constexpr const char* kEvalplusSplitter = "-[[]]-this-is-really-our-highest-priority-[[]]-";
inline const std::vector<std::string> kEvalplusEos = {"<|endoftext|>", "<|endofmask|>", "</s>", "\nif __name__", "\ndef main(", "\nprint("};

// EvalPlus's task["prompt"]: HumanEval(+)'s prompt; MBPP's task and first assert in a docstring
// ('"""\n' + task + "\n" + assert + '\n"""\n', MBPP+'s form); MBPP+'s prompt as it is.
std::string task_prompt(const Problem& p);

// s without Python's str.strip() whitespace at either end (the ASCII ones: " \t\n\r\v\f" and
// \x1c-\x1f).
std::string python_strip(const std::string& s);

// The text a base model continues (chat = false), or a chat model's user turn.
std::string prompt_text(const Problem& p, PromptStyle style, bool chat);

// The conversation EvalPlus renders for a chat model: the user turn and the assistant's begun one
// (its content holds kEvalplusSplitter, where render_prefilled cuts).
std::vector<ChatMessage> evalplus_chat(const Problem& p, const std::string& system);

// A problem's prompt ids: the style's text, through the chat template with --chat (evalplus:
// render_prefilled, then encoded as plain text). `where` names the problem in an error.
std::vector<int> encode_problem(const ModelOptions& f, const LoadedModel& m, const Problem& p, PromptStyle style, const std::string& where);

// The stop strings unless --stop is given. dataset: "humaneval", "humaneval+", "mbpp", "mbpp+"
// (Problem::dataset); bestofn's are extract.h's default_stop_strings (MBPP's for MBPP+).
std::vector<std::string> style_stop_strings(const std::string& dataset, PromptStyle style, bool chat);

// --prompt-style evalplus: the text EvalPlus sanitizes for a generated one, tabs made four spaces:
// the prompt text (base) followed by the completion, or the reply (chat).
std::string evalplus_sanitizer_input(const Problem& p, const std::string& completion, bool chat);

}  // namespace bestofn
