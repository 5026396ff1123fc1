// gtest assertions on a runtime Status that print its message when it failed.
#ifndef MT_TEST_UNIT_STATUSASSERTIONS_H
#define MT_TEST_UNIT_STATUSASSERTIONS_H

#include "core/Status.h"

#include <gtest/gtest.h>

#define MT_STATUS_ASSERTION(assertion, expr)                                               \
  do {                                                                                     \
    const ::mt::Status mtStatus = (expr);                                                  \
    assertion(mtStatus.ok()) << #expr << ": " << mtStatus.message();                       \
  } while (0)
#define ASSERT_OK(expr) MT_STATUS_ASSERTION(ASSERT_TRUE, expr)
#define EXPECT_OK(expr) MT_STATUS_ASSERTION(EXPECT_TRUE, expr)

#endif
