// Model weights as safetensors files (docs/formats/safetensors.md): export from an f32 arena
// laid out by AddGptTensors, import into one, and the architecture recorded in the metadata.
#pragma once

#include <map>
#include <string>

#include "base/status.h"
#include "kernels/tensor.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace rt {

// Writes every tensor of `weights` (f32, AddGptTensors layout of `config`) as F32 with DESIGN.md's
// names, and `config` plus `tokenizer` ("byte" or "gpt2") as metadata. Errors: IoError naming
// the path; InvalidArgument if the arena is not f32.
Status ExportWeights(const std::string& path, const ModelConfig& config,
                     const std::string& tokenizer, const Arena& weights);

// The `__metadata__` that records `config` and `tokenizer` ("byte" or "gpt2") in a weights file
// (docs/formats/safetensors.md), as ExportWeights writes it and WeightsConfig reads it.
std::map<std::string, std::string> WeightsMetadata(const ModelConfig& config,
                                                   const std::string& tokenizer);

// Reads every tensor of `weights`' layout from `file` (F32, BF16 or F16 are accepted and
// converted to f32). Errors: NotFound naming a missing tensor, InvalidArgument naming a tensor of
// another shape or dtype.
Status ImportWeights(const SafetensorsFile& file, const Arena& weights);

// The architecture and tokenizer recorded by ExportWeights. Errors: InvalidArgument naming a
// missing or malformed metadata key.
Result<ModelConfig> WeightsConfig(const SafetensorsFile& file, std::string* tokenizer);

}  // namespace rt
