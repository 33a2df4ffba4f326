#pragma once
// What a call is expected to throw as shaper::SystemError: its errno and its whole text, what()
// then " | hint: " and the hint, for tests that check both the cause and the words users read.
// A call that does not throw one is a test failure.

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "shaper/errors.hpp"

namespace test_support {

template <class F>
std::pair<int, std::string> system_error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const shaper::SystemError& e) {
    return {e.error_number(), std::string(e.what()) + " | hint: " + e.hint()};
  }
  ADD_FAILURE() << "no SystemError";
  return {0, {}};
}

}  // namespace test_support
