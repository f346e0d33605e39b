#pragma once
// Shared by test_tokenizer.cpp and test_tokenizer_constructs.cpp (one test binary).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bestofn/tokenizer/tokenizer.h"
#include "bestofn/util/error.h"
#include "test_util.h"

namespace bestofn::test {

// `base` with `edit` applied, written as a tokenizer.json, must fail to load with one line that
// names the file and contains `part`.
template <typename Edit>
void expect_tokenizer_error(const nlohmann::json& base, Edit edit, const std::string& part) {
  TempDir dir;
  nlohmann::json j = base;
  edit(j);
  write_text(dir / "tokenizer.json", j.dump());
  try {
    Tokenizer::load(dir / "tokenizer.json");
    ADD_FAILURE() << "accepted: " << part;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tokenizer.json: "), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace bestofn::test
