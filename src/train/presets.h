// Model presets for `pldr train --preset NAME`: a few model shapes, with the vocabulary size
// taken from the data (the token shard's header).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace pldr {

// The config of preset `name` with vocabulary `vocab_size` (a learned G_LM, PLDR-LLM v510):
//   tiny:     L2 H2 dk16  (d 32),  A_dff 16,  R 2, N 2, max_position 256   (~10^5 + 33·V params)
//   small:    L4 H4 dk32  (d 128), A_dff 64,  R 4, N 2, max_position 512   (~1.2M + 129·V params)
//   v51-110M: L5 H14 dk64 (d 896), A_dff 170, R 8, N 2, max_position 1024 (spec §5.5; 109.7M
//             parameters with V = 32000)
// Throws pldr::Error naming the valid presets for an unknown name.
Config preset_config(const std::string& name, int64_t vocab_size);

// Turns a config into its fixed-G_LM twin with custom_G_type "identity" (the SDPA baseline):
// same shape, no metric learner (A_dff, R and N become null).
Config sdpa_twin(Config c);

}  // namespace pldr
