// Test helper: the message of the pldr::Error a statement throws, and an assertion that it is
// one line containing a given text.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const pldr::Error& e) {
        return e.what();
    }
    return "<no error>";
}

#define EXPECT_ERROR_HAS(stmt, sub)                                              \
    do {                                                                         \
        std::string msg_ = error_of([&] { stmt; });                              \
        EXPECT_NE(msg_.find(sub), std::string::npos) << "message: " << msg_;     \
        EXPECT_EQ(msg_.find('\n'), std::string::npos) << "multi-line: " << msg_; \
    } while (0)
