// Every kernel header of src/ops at once, for code that wants them all (tests, tools). Library
// code includes the narrow header it needs, so that a change to one kernel rebuilds only its
// users. Shapes: N rows, C (or I/O) features; B batch, S queries, T keys, H heads, D head dim
// (dk). Backward functions ACCUMULATE (+=) into every gradient they produce, so callers zero
// gradient buffers once per step. The maths is in docs/plga.md.
#pragma once
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/glu.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/plga.h"
#include "ops/rope.h"
#include "ops/softmax.h"
