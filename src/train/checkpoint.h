// Training checkpoints. A checkpoint directory is a loadable model directory plus the training
// state beside it:
//   DIR/config.json, DIR/model.safetensors    (io/model_load.h save_model, in the compute dtype)
//   DIR/train_state.safetensors               (this file's format, docs/formats.md)
// train_state.safetensors holds `optimizer.m.<param>` and `optimizer.v.<param>` (AdamW exp_avg
// and exp_avg_sq, compute dtype, parameter shapes) and string metadata:
//   format "pldr-train-state", version "1", step, dtype ("f32"|"f64"), data_position,
//   data_epoch_rng (4 × u64 hex), train_shard_fnv1a64 (hex), model_fnv1a64 (hex FNV-1a 64 of
//   the model.safetensors bytes it belongs to), options (the training options as JSON),
//   config (config.json text), world_size (data-parallel ranks; optional, default 1).
//
// Writing is transactional: the three files go to DIR/.ckpt-new/, then a COMMIT marker is
// written there, then the files are renamed into DIR one by one, then the marker and the
// folder are removed. Opening a checkpoint first repairs DIR: a .ckpt-new with a COMMIT marker
// (an interrupted swap) is completed, one without (an interrupted write) is discarded. So an
// interruption at any point leaves either the previous or the new checkpoint, never a mix; the
// model hash recorded in the state also catches a pair mixed by hand.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "model/model.h"
#include "train/adamw.h"
#include "train/data_loader.h"

namespace pldr {

struct CheckpointInfo {
    int64_t step = 0;
    std::string dtype;  // "f32" | "f64"
    LoaderState data;
    uint64_t train_shard_fnv = 0;
    std::string options_json;  // the training options (trainer_loop.h), JSON text
    int64_t world_size = 1;    // data-parallel ranks that wrote it (metadata "world_size";
                               // absent in older checkpoints: 1). data.position is global.
};

inline constexpr const char* kTrainStateFile = "train_state.safetensors";
inline constexpr const char* kTrainStateFormat = "pldr-train-state";
inline constexpr int kTrainStateVersion = 1;

// Writes model + optimizer + info into `dir` (created if missing) transactionally.
template <typename T>
void save_checkpoint(const std::string& dir, const Model<T>& m, const AdamWState<T>& opt,
                     const CheckpointInfo& info);

// Repairs an interrupted write (see above); returns true when `dir` holds a checkpoint
// (train_state.safetensors) afterwards.
bool recover_checkpoint(const std::string& dir);

// Reads only the metadata of DIR/train_state.safetensors (after recover_checkpoint).
CheckpointInfo read_checkpoint_info(const std::string& dir);

// Loads a checkpoint: the model directory into `m` and the optimizer state into `opt`; checks
// the format, version, dtype (must be T's), that the model file is the one the state was
// written with, and the moment tensors' names and shapes against the model's layout. Every
// problem is one line naming the directory.
template <typename T>
CheckpointInfo load_checkpoint(const std::string& dir, Model<T>* m, AdamWState<T>* opt);

}  // namespace pldr
