#include <gtest/gtest.h>

#include "core/tensor.h"

TEST(Tensor, Numel) {
    EXPECT_EQ(pldr::Tensor<float>({2, 3}).numel(), 6);
}
