// Device time per phase of the model's passes, for finding where a step's time goes on the GPU
// (docs/gpu.md "Where the time goes"). Off unless PLDR_CUDA_PROFILE=1 (or profile_enable), when
// a Phase costs nothing but the check. On: each Phase records a CUDA event on its stream where
// it starts and one where it ends; the pairs are resolved later (when many are pending, and by
// profile_take), so timing adds no synchronisation to a pass. Phases nest: a phase's time
// includes its children's. Not while a stream is being captured into a graph (the decode
// step's): no events are recorded then. A timer never fails a pass: where the runtime refuses
// an event, that phase's time is dropped (and the runtime's error cleared). Events are pooled per
// device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/kernels.h"

namespace pldr::cuda {

bool profile_on();
void profile_enable(bool on);  // overrides PLDR_CUDA_PROFILE (tests)

class Phase {
  public:
    Phase(const char* name, Stream s);
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

  private:
    int slot_ = -1;
    int device_ = 0;
    int64_t generation_ = 0;
    void* start_ = nullptr;  // cudaEvent_t
    Stream s_ = nullptr;
};

struct PhaseTime {
    std::string name;
    int depth = 0;      // nesting level where it was first seen (0: outermost)
    int64_t calls = 0;  // completed phases of this name
    double ms = 0;      // device time between their start and end events, summed
};

// The phases timed since the last reset, in the order first seen; waits for the device to reach
// every pending end event. reset: start a new table.
std::vector<PhaseTime> profile_take(bool reset);

}  // namespace pldr::cuda
