#pragma once
// EXPECT_ERROR(statement, Type, text): the statement throws a Type whose message contains
// `text`. Failure-path tests assert the message, not only the type: a type-only check also
// passes when another check, or another failure altogether, throws first.
#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace rrfp::test {

// Whether `what` contains `text`; on failure it shows both.
inline ::testing::AssertionResult message_contains(const std::string& what,
                                                   const std::string& text) {
  if (what.find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the message\n  " << what << "\ndoes not contain\n  " << text;
}

}  // namespace rrfp::test

// A macro, not a function, so that a failure names the test's line and the statement.
#define EXPECT_ERROR(statement, type, text)                                                     \
  do {                                                                                          \
    try {                                                                                       \
      statement;                                                                                \
      ADD_FAILURE() << #statement " threw nothing; expected " #type ": " << (text);             \
    } catch (const type& rrfp_error_) {                                                         \
      EXPECT_TRUE(::rrfp::test::message_contains(rrfp_error_.what(), (text))) << #statement;    \
    } catch (const std::exception& rrfp_error_) {                                               \
      ADD_FAILURE() << #statement " threw another type than " #type ": " << rrfp_error_.what(); \
    } catch (...) {                                                                             \
      ADD_FAILURE() << #statement " threw something that is no std::exception";                 \
    }                                                                                           \
  } while (false)
