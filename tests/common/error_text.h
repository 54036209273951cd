// ErrorText(fn): runs fn and returns the message of the troupe::Error it throws; records a test failure and
// returns "" when it throws none. For tests that check several parts of one message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace troupe {

template <typename F>
std::string ErrorText(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no troupe::Error thrown";
  return "";
}

}  // namespace troupe
