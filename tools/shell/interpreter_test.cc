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
  EXPECT_EQ(big, "[0.000e+00 1.000e+00 2.000e+00 ... 1.997e+03 1.998e+03 1.999e+03]\n<NDArray 2000 @cpu(0)>");
}

// The expected texts are NumPy 1.23.5's str() of the same float32 arrays (MXNet prints an NDArray that way):
// rows wrapped between elements at 75 columns, shortest round-trip digits, scientific notation when the
// magnitudes are far apart, nan and inf aligned.
TEST(ShellInterpreter, PrintsLongRowsAsNumPyDoes) {
  Interpreter in;
  const auto values = [&](const std::string& expr) {
    const std::string t = Ok(&in, expr).text;
    return t.substr(0, t.rfind("\n<NDArray"));
  };
  EXPECT_EQ(values("arange(40) * 1.5"),
            "[ 0.   1.5  3.   4.5  6.   7.5  9.  10.5 12.  13.5 15.  16.5 18.  19.5\n 21.  22.5 24.  25.5 27.  28.5 "
            "30.  31.5 33.  34.5 36.  37.5 39.  40.5\n 42.  43.5 45.  46.5 48.  49.5 51.  52.5 54.  55.5 57.  58.5]");
  EXPECT_EQ(values("reshape(arange(60) / 7, 2, 30)"),
            "[[0.         0.14285715 0.2857143  0.42857143 0.5714286  0.71428573\n  0.85714287 1.         1.1428572  "
            "1.2857143  1.4285715  1.5714285\n  1.7142857  1.8571428  2.         2.142857   2.2857144  2.4285715\n  "
            "2.5714285  2.7142856  2.857143   3.         3.142857   3.2857144\n  3.4285715  3.5714285  3.7142856  "
            "3.857143   4.         4.142857  ]\n [4.285714   4.428571   4.571429   4.714286   4.857143   5.\n  "
            "5.142857   5.285714   5.428571   5.571429   5.714286   5.857143\n  6.         6.142857   6.285714   "
            "6.428571   6.571429   6.714286\n  6.857143   7.         7.142857   7.285714   7.428571   7.571429\n  "
            "7.714286   7.857143   8.         8.142858   8.285714   8.428572  ]]");
  EXPECT_EQ(values("reshape(arange(24) / 3, 2, 3, 4)"),
            "[[[0.         0.33333334 0.6666667  1.        ]\n  [1.3333334  1.6666666  2.         2.3333333 ]\n  "
            "[2.6666667  3.         3.3333333  3.6666667 ]]\n\n [[4.         4.3333335  4.6666665  5.        ]\n  "
            "[5.3333335  5.6666665  6.         6.3333335 ]\n  [6.6666665  7.         7.3333335  7.6666665 ]]]");
  EXPECT_EQ(values("Concat(full(1, 0.00001), ones(1), full(1, nan), full(1, -inf), dim=0, num_args=4)"),
            "[1.e-05 1.e+00    nan   -inf]");
  // No line is longer than NumPy's 75 columns, whatever the shape.
  const std::string wide = values("uniform(3, 50) * 1000");
  std::size_t longest = 0;
  for (std::size_t at = 0, nl; at < wide.size(); at = nl + 1) {
    nl = std::min(wide.find('\n', at), wide.size());
    longest = std::max(longest, nl - at);
  }
  EXPECT_LE(longest, 75u) << wide;
}

// The functions a NumPy or MXNet user reaches for first come from the operator registry, not from copies.
TEST(ShellInterpreter, EverydayFunctionsComeFromTheRegistry) {
  Interpreter in;
  Ok(&in, "a = reshape(arange(6) - 2, 2, 3)");
  Ok(&in, "r = relu(a)");
  EXPECT_EQ(Values(in, "r"), (std::vector<float>{0, 0, 0, 1, 2, 3}));
  Ok(&in, "t = transpose(a)");
  EXPECT_EQ(Values(in, "t"), (std::vector<float>{-2, 1, -1, 2, 0, 3}));
  Ok(&in, "m = argmax(a, axis=1)");
  EXPECT_EQ(Values(in, "m"), (std::vector<float>{2, 2}));
  Ok(&in, "e = log(exp(a))");
  const std::vector<float> e = Values(in, "e");
  for (std::size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(e[i], static_cast<float>(i) - 2, 1e-5);
  Ok(&in, "s = sigmoid(a * 0)");
  EXPECT_EQ(Values(in, "s"), std::vector<float>(6, 0.5f));
}

TEST(ShellInterpreter, AstypeNanAndInf) {
  Interpreter in;
  EXPECT_EQ(Ok(&in, "astype(arange(5) * 1.7, int32)").text, "[0 1 3 5 6]\n<NDArray 5 int32 @cpu(0)>");
  EXPECT_EQ(Ok(&in, "astype(ones(2), 'float64') / 3").text, "[0.33333333 0.33333333]\n<NDArray 2 float64 @cpu(0)>");
  EXPECT_EQ(Ok(&in, "print -inf").text, "-inf");
  EXPECT_EQ(Ok(&in, "full(2, nan)").text, "[nan nan]\n<NDArray 2 @cpu(0)>");
  Ok(&in, "c = clip(arange(4), a_min=-inf, a_max=2)");
  EXPECT_EQ(Values(in, "c"), (std::vector<float>{0, 1, 2, 2}));
  const Outcome bad = in.Run("astype(ones(2), int33)");
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.text.find("int33"), std::string::npos) << bad.text;
}

// A registered iterator by name (CSVIter here, on a file the test writes), and mnist() when Debian's
// Fashion-MNIST is installed: next(it) gives the data, label(it) the label, reset(it) rewinds.
TEST(ShellInterpreter, IteratorsGiveBatches) {
  const std::string csv = ::testing::TempDir() + "shell_iter.csv";
  {
    std::FILE* f = std::fopen(csv.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("1,2\n3,4\n5,6\n", f);
    std::fclose(f);
  }
  Interpreter in;
  Ok(&in, "it = CSVIter(data_csv='" + csv + "', data_shape=(2,), batch_size=2)");
  EXPECT_NE(Ok(&in, "it").text.find("<DataIter CSVIter: data 2x2"), std::string::npos);
  Ok(&in, "x = next(it)");
  EXPECT_EQ(Values(in, "x"), (std::vector<float>{1, 2, 3, 4}));
  Ok(&in, "y = next(it)");  // the last batch, padded from the start as MXNet pads it
  EXPECT_EQ(Values(in, "y"), (std::vector<float>{5, 6, 1, 2}));
  Outcome end = in.Run("next(it)");
  EXPECT_FALSE(end.ok);
  EXPECT_NE(end.text.find("all 2 batches of this epoch; reset(it)"), std::string::npos) << end.text;
  // MXNet's round_batch: the rows that padded the last batch are not read again, the epoch goes on after them.
  Ok(&in, "reset(it)");
  Ok(&in, "z = next(it) * 10");
  EXPECT_EQ(Values(in, "z"), (std::vector<float>{30, 40, 50, 60}));
  EXPECT_NE(Ok(&in, "vars").text.find("it  <DataIter CSVIter"), std::string::npos);
  Outcome not_array = in.Run("it + 1");
  EXPECT_FALSE(not_array.ok);
  EXPECT_NE(not_array.text.find("data iterator, not an array"), std::string::npos) << not_array.text;
  EXPECT_FALSE(in.Run("next(x)").ok);
  EXPECT_FALSE(in.Run("CSVIter(2)").ok);
  Ok(&in, "del it");
  EXPECT_FALSE(in.Run("it").ok);

  if (std::FILE* f = std::fopen("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "rb")) {
    std::fclose(f);
    Ok(&in, "m = mnist(batch_size=3, train=0)");
    const Outcome no_batch = in.Run("label(m)");
    EXPECT_FALSE(no_batch.ok);
    EXPECT_NE(no_batch.text.find("next(it) gives one"), std::string::npos) << no_batch.text;
    Ok(&in, "d = next(m)");
    Ok(&in, "l = label(m)");
    EXPECT_EQ(in.Find("d")->shape(), TShape({3, 1, 28, 28}));
    EXPECT_EQ(Values(in, "l"), (std::vector<float>{9, 2, 1}));  // the first labels of Fashion-MNIST's test set
  }
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
  EXPECT_NE(all.find("start the shell with --connect HOST:PORT"), std::string::npos) << all;
  EXPECT_EQ(all.find("not there yet"), std::string::npos) << all;
  EXPECT_EQ(all.find("kv push"), std::string::npos);
  // Connected (cluster_commands.h adds its commands): they are listed, with no word of how to get them.
  in.AddCommand("nodes", "nodes", "the cluster's nodes", [](const std::vector<std::string>&) { return std::string(); });
  const std::string connected = Ok(&in, "help").text;
  EXPECT_NE(connected.find("the cluster's nodes"), std::string::npos) << connected;
  EXPECT_EQ(connected.find("--connect"), std::string::npos) << connected;
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
