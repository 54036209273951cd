// The shell's language without the front end: values, operators, errors and what they leave behind.
#include "tools/shell/interpreter.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace troupe::shell {
namespace {

std::vector<float> Values(const Interpreter& in, const std::string& name) {
  const NDArray* a = in.Find(name);
  EXPECT_NE(a, nullptr) << name;
  return a == nullptr ? std::vector<float>{} : a->ToVector<float>();
}

Outcome Ok(Interpreter* in, const std::string& s) {
  Outcome o = in->Run(s);
  EXPECT_TRUE(o.ok) << s << ": " << o.text;
  return o;
}

TEST(ShellInterpreter, ArithmeticFollowsPrecedence) {
  Interpreter in;
  Ok(&in, "a = ones(2,3)");
  Ok(&in, "b = a * 2 + 1");
  EXPECT_EQ(Values(in, "b"), std::vector<float>(6, 3.0f));
  Ok(&in, "c = 1 + a * (2 + 4) / 3 - -a");
  EXPECT_EQ(Values(in, "c"), std::vector<float>(6, 4.0f));
  Ok(&in, "d = 10 - a * 4");  // number op array
  EXPECT_EQ(Values(in, "d"), std::vector<float>(6, 6.0f));
  Ok(&in, "e = 6 / (a + a)");
  EXPECT_EQ(Values(in, "e"), std::vector<float>(6, 3.0f));
  EXPECT_EQ(Ok(&in, "2 + 3 * 4").text, "14");
  EXPECT_EQ(Ok(&in, "print (2 + 3) * 4").text, "20");
}

TEST(ShellInterpreter, PrintsLikeMXNet) {
  Interpreter in;
  EXPECT_EQ(Ok(&in, "ones(2,3) * 2 + 1").text, "[[3. 3. 3.]\n [3. 3. 3.]]\n<NDArray 2x3 @cpu(0)>");
  EXPECT_EQ(Ok(&in, "print arange(4) / 2").text, "[0.  0.5 1.  1.5]\n<NDArray 4 @cpu(0)>");
  EXPECT_EQ(Ok(&in, "full(2,2,1, 7)").text, "[[[7.]\n  [7.]]\n\n [[7.]\n  [7.]]]\n<NDArray 2x2x1 @cpu(0)>");
  const std::string big = Ok(&in, "arange(2000)").text;
  EXPECT_EQ(big, "[   0.    1.    2. ... 1997. 1998. 1999.]\n<NDArray 2000 @cpu(0)>");
}

TEST(ShellInterpreter, SlicesTheFirstAxis) {
  Interpreter in;
  Ok(&in, "a = reshape(arange(6), 3, 2)");
  Ok(&in, "r = a[1]");
  EXPECT_EQ(Values(in, "r"), (std::vector<float>{2, 3}));
  Ok(&in, "s = a[0:2]");
  EXPECT_EQ(Values(in, "s"), (std::vector<float>{0, 1, 2, 3}));
  Ok(&in, "t = a[-1]");
  EXPECT_EQ(Values(in, "t"), (std::vector<float>{4, 5}));
  Ok(&in, "u = a[1:][0]");
  EXPECT_EQ(Values(in, "u"), (std::vector<float>{2, 3}));
  const Outcome o = in.Run("a[3]");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("out of range for axis 0 of size 3"), std::string::npos) << o.text;
}

TEST(ShellInterpreter, CallsRegisteredOperatorsWithKeywords) {
  Interpreter in;
  Ok(&in, "a = ones(2,3)");
  Ok(&in, "w = full(4,3, 0.5)");
  Ok(&in, "c = FullyConnected(data=a, weight=w, num_hidden=4, no_bias=true)");
  EXPECT_EQ(Values(in, "c"), std::vector<float>(8, 1.5f));
  EXPECT_EQ(in.Find("c")->shape(), TShape({2, 4}));
  // Positional inputs, a quoted parameter, a parameter computed from numbers.
  Ok(&in, "r = Activation(a * -1, act_type='relu')");
  EXPECT_EQ(Values(in, "r"), std::vector<float>(6, 0.0f));
  Ok(&in, "b = ones(4)");
  Ok(&in, "c2 = FullyConnected(a, w, b, num_hidden=2*2)");
  EXPECT_EQ(Values(in, "c2"), std::vector<float>(8, 2.5f));
  // A tuple-valued parameter is passed as its text.
  Ok(&in, "x = ones(1,1,4,4)");
  Ok(&in, "p = Pooling(x, kernel=(2,2), stride=(2,2), pool_type=max)");
  EXPECT_EQ(in.Find("p")->shape(), TShape({1, 1, 2, 2}));
}

TEST(ShellInterpreter, ParseErrorsNameTheColumn) {
  Interpreter in;
  Outcome o = in.Run("b = ones(2) *");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("parse error at column 14"), std::string::npos) << o.text;
  o = in.Run("b = (1 + 2");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("column 11: expected ')'"), std::string::npos) << o.text;
  o = in.Run("b = 1 $ 2");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("column 7: unexpected character '$'"), std::string::npos) << o.text;
  EXPECT_EQ(in.Find("b"), nullptr);
}

TEST(ShellInterpreter, ErrorsSuggestNamesAndLeaveStateIntact) {
  Interpreter in;
  Ok(&in, "a = ones(2,3)");
  Outcome o = in.Run("a = FullyConected(data=a, num_hidden=4)");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("unknown function or operator 'FullyConected'"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("did you mean: "), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("FullyConnected"), std::string::npos) << o.text;
  EXPECT_EQ(Values(in, "a"), std::vector<float>(6, 1.0f));  // unchanged
  Ok(&in, "r = a + arange(3)");                             // broadcasting (2,3) with (3)
  EXPECT_EQ(Values(in, "r"), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  o = in.Run("a = a + ones(3,2)");
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(in.Find("a")->shape(), TShape({2, 3}));
  o = in.Run("c = aa * 2");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("undefined variable 'aa'; did you mean: a?"), std::string::npos) << o.text;
  o = in.Run("c = FullyConnected(data=a, num_hidden=4)");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("missing input 'weight'"), std::string::npos) << o.text;
  o = in.Run("c = FullyConnected(data=a, weight=a, bias=a, num_hidden=-4)");
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(in.Find("c"), nullptr);
  o = in.Run("engin stats");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("unknown command 'engin'; did you mean: engine?"), std::string::npos) << o.text;
  // The interpreter goes on.
  EXPECT_EQ(Ok(&in, "a[0]").text, "[1. 1. 1.]\n<NDArray 3 @cpu(0)>");
}

TEST(ShellInterpreter, HelpComesFromTheRegistry) {
  Interpreter in;
  const std::string fc = Ok(&in, "help FullyConnected").text;
  EXPECT_NE(fc.find("num_hidden (int"), std::string::npos) << fc;
  EXPECT_NE(fc.find("no_bias (boolean"), std::string::npos) << fc;
  EXPECT_NE(fc.find("weight (NDArray-or-Symbol)"), std::string::npos) << fc;
  const std::string all = Ok(&in, "help").text;
  EXPECT_NE(all.find("profile start|stop|table|dump FILE"), std::string::npos);
  EXPECT_NE(all.find("come with cluster mode"), std::string::npos);
  EXPECT_EQ(all.find("kv push"), std::string::npos);
  const Outcome o = in.Run("help FullyConected");
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("FullyConnected"), std::string::npos) << o.text;
}

TEST(ShellInterpreter, CompletesOperatorsCommandsAndVariables) {
  Interpreter in;
  Ok(&in, "fuzz = ones(1)");
  const auto c = in.Completions("Fully");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0], "FullyConnected");
  const auto f = in.Completions("fu");
  EXPECT_EQ(f, (std::vector<std::string>{"full", "fuzz"}));
  EXPECT_EQ(in.Completions("pro"), (std::vector<std::string>{"prod", "profile"}));  // an operator and a command
}

TEST(ShellInterpreter, CommandsLoadSaveDelWaitEngineProfile) {
  Interpreter in;
  const std::string path = ::testing::TempDir() + "/shell_interpreter_test.params";
  EXPECT_FALSE(in.Run("a = arange(3); b = ones(2,2)").ok);  // ';' is SplitStatements' job, not Run's
  EXPECT_EQ(in.Find("a"), nullptr);
  for (const auto& s : Interpreter::SplitStatements("a = arange(3); b = ones(2,2) # c = 1\n\n d = b[0:1]")) Ok(&in, s);
  EXPECT_NE(in.Find("d"), nullptr);
  Ok(&in, "save " + path + " a b");
  Ok(&in, "del a b d");
  EXPECT_EQ(in.Find("a"), nullptr);
  EXPECT_FALSE(in.Run("del a").ok);
  EXPECT_NE(Ok(&in, "load " + path).text.find("loaded 2 arrays: a (3) b (2x2)"), std::string::npos);
  EXPECT_EQ(Values(in, "a"), (std::vector<float>{0, 1, 2}));
  EXPECT_FALSE(in.Run("load /nonexistent/x.params").ok);
  Ok(&in, "wait");
  Ok(&in, "wait a b");
  const std::string stats = Ok(&in, "engine stats").text;
  EXPECT_NE(stats.find("pending"), std::string::npos) << stats;
  EXPECT_NE(stats.find("cpu(0)"), std::string::npos) << stats;
  EXPECT_FALSE(in.Run("engine").ok);
  Ok(&in, "profile start");
  Ok(&in, "c = a * 2 + 1");
  Ok(&in, "wait");
  Ok(&in, "c = a * 3");
  const std::string table = Ok(&in, "profile stop").text;
  EXPECT_FALSE(table.empty());
  const std::string trace = ::testing::TempDir() + "/shell_interpreter_test.json";
  EXPECT_NE(Ok(&in, "profile dump " + trace).text.find("wrote"), std::string::npos);
  std::FILE* f = std::fopen(trace.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_FALSE(in.Run("profile").ok);
  EXPECT_FALSE(in.quit_requested());
  Ok(&in, "quit");
  EXPECT_TRUE(in.quit_requested());
  std::remove(path.c_str());
  std::remove(trace.c_str());
}

TEST(ShellInterpreter, LoadsACheckpointsNamesAsVariables) {
  const std::string path = ::testing::TempDir() + "/shell_interpreter_test_ckpt.params";
  NDArray::Save(path, {NDArray::Ones(TShape({2, 2}), Context::CPU()), NDArray::Zeros(TShape({3}), Context::CPU())},
                {"arg:fc1_weight", "aux:bn0_moving_mean"});
  Interpreter in;
  EXPECT_EQ(Ok(&in, "load " + path).text, "loaded 2 arrays: bn0_moving_mean (3) fc1_weight (2x2)");
  EXPECT_EQ(Values(in, "fc1_weight"), std::vector<float>(4, 1.0f));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace troupe::shell
