// Error-text checks shared by test files: tests assert the message of the exception, not just its type.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace weft::testing {

// The message of the exception of type E that f throws; a test failure if it throws nothing or another type.
template <class E>
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "threw nothing";
  return "";
}

// Every part occurs in text.
inline void ExpectContains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not in: " << text;
}

// f throws an InvalidArgument (weft/error.hpp) whose message holds every part; a test failure otherwise.
template <class InvalidArgumentType>
void ExpectThrowsWith(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const InvalidArgumentType& e) {
    const std::string message = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(message.find(p), std::string::npos) << "missing: " << p << "\nin message:\n" << message;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected the error, got another: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected the error, nothing was thrown";
}

}  // namespace weft::testing
