// The byte tokenizer, GPT-2's pre-tokenizer and GPT-2 BPE against encodings made by the
// reference gpt-3-encoder@1.1.4 (node).
#include "data/tokenizer.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace rt {
namespace {

TEST(ByteTokenizer, RoundTrip) {
  auto t = MakeByteTokenizer();
  std::string text("a\0\xff z", 5);
  auto ids = t->Encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 0, 255, ' ', 'z'}));
  EXPECT_EQ(*t->Decode(ids), text);
  EXPECT_FALSE(t->Decode(std::vector<int32_t>{256}).ok());
}

std::vector<std::string> Pieces(std::string_view text) {
  std::vector<std::string> out;
  for (auto p : Gpt2PreTokenize(text)) out.emplace_back(p);
  return out;
}

TEST(Gpt2PreTokenize, FollowsThePattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces("It's 2024!!"), (V{"It", "'s", " 2024", "!!"}));
  EXPECT_EQ(Pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(Pieces("a \n\nb "), (V{"a", " \n", "\n", "b", " "}));
  EXPECT_EQ(Pieces("x\xc2\xa0y"), (V{"x", "\xc2\xa0", "y"}));  // NBSP is \s
  EXPECT_EQ(Pieces("caf\xc3\xa9s"), (V{"caf\xc3\xa9s"}));      // é is \p{L}
  EXPECT_EQ(Pieces("\xff\xfe ok"), (V{"\xff\xfe", " ok"}));    // invalid UTF-8: "other"
  EXPECT_EQ(Pieces(" '"), (V{" '"}));
  EXPECT_EQ(Pieces("I'll"), (V{"I", "'ll"}));
  std::string joined;
  for (auto& p : Pieces("mixed \t\n text, 123abc  ")) joined += p;
  EXPECT_EQ(joined, "mixed \t\n text, 123abc  ");
}

class Gpt2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = DefaultGpt2VocabDir();
    if (!std::filesystem::exists(dir + "/encoder.json") ||
        !std::filesystem::exists(dir + "/vocab.bpe")) {
      GTEST_SKIP() << "GPT-2 vocabulary not found in " << dir
                   << " (tools/run setup fetches it; or set RINGTRAIN_GPT2_VOCAB)";
    }
    auto t = MakeGpt2Tokenizer(dir);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = std::move(*t);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Gpt2Test, KnownEncodings) {
  struct Case {
    std::string text;
    std::vector<int32_t> ids;
  } cases[] = {
      {"Hello world", {15496, 995}},
      {" Hello, world! It's 2024.", {18435, 11, 995, 0, 632, 338, 48609, 13}},
      {"The quick brown fox\n\njumps   over the lazy dog.",
       {464, 2068, 7586, 21831, 198, 198, 73, 8142, 220, 220, 625, 262, 16931, 3290, 13}},
      {"I'll they're we've  \t tabs", {40, 1183, 484, 821, 356, 1053, 220, 220, 197, 22524}},
      {"na\xc3\xafve caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac 123456",
       {2616, 38776, 40304, 10545, 251, 109, 12859, 105, 17031, 29228}},
      {"a\xc2\xa0"
       "b",
       {64, 1849, 65}},
      {"emoji \xf0\x9f\x98\x80!", {368, 31370, 30325, 222, 0}},
      {"IT'S A TEST  \n  x", {2043, 6, 50, 317, 43001, 220, 220, 198, 220, 2124}},
      {"tab\there\r\nnext   \n", {8658, 197, 1456, 201, 198, 19545, 220, 220, 220, 198}},
      {"x  ", {87, 220, 220}},
      {"3.14159 1,000,000 ab12cd", {18, 13, 1415, 19707, 352, 11, 830, 11, 830, 450, 1065, 10210}},
      {"don't  'quoted'", {9099, 470, 220, 705, 421, 5191, 6}},
  };
  EXPECT_EQ(tok_->vocab_size(), 50257u);
  EXPECT_EQ(tok_->end_of_text(), 50256);
  for (const Case& c : cases) {
    EXPECT_EQ(tok_->Encode(c.text), c.ids) << c.text;
    EXPECT_EQ(*tok_->Decode(c.ids), c.text);
  }
}

TEST(Gpt2Tokenizer, MissingVocabularyNamesTheFile) {
  auto t = MakeGpt2Tokenizer("/nonexistent/vocab");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("encoder.json"), std::string::npos);
  EXPECT_FALSE(MakeTokenizer("wordpiece", "").ok());
}

}  // namespace
}  // namespace rt
