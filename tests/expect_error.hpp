#pragma once
// EXPECT_ERROR(statement, Type, text): the statement throws a Type whose message contains
// `text`. Failure-path tests assert the message, not only the type: a type-only check also
// passes when another check, or another failure altogether, throws first.
#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace rrfp::test {

// Whether `f` throws an `E` whose message contains `text`; on failure it says what happened.
template <class E, class F>
::testing::AssertionResult throws_error(F&& f, const std::string& text) {
  try {
    f();
  } catch (const E& e) {
    const std::string what = e.what();
    if (what.find(text) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "the message\n  " << what << "\ndoes not contain\n  " << text << "\n";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "it threw another type: " << e.what() << "\n";
  } catch (...) {
    return ::testing::AssertionFailure() << "it threw something that is no std::exception\n";
  }
  return ::testing::AssertionFailure() << "it threw nothing; expected: " << text << "\n";
}

}  // namespace rrfp::test

// A macro, so that a failure names the test's line and the statement; `<<` adds context, as
// after EXPECT_THROW.
#define EXPECT_ERROR(statement, type, text) \
  EXPECT_TRUE(::rrfp::test::throws_error<type>([&] { statement; }, (text))) << "in: " #statement
