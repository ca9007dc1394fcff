#include "model/weights.h"

#include <charconv>
#include <vector>

#include "kernels/element.h"
#include "kernels/ops.h"

namespace rt {

Status ExportWeights(const std::string& path, const ModelConfig& config,
                     const std::string& tokenizer, const Arena& weights) {
  std::vector<std::vector<float>> host(weights.size());
  std::vector<SafetensorsInput> inputs;
  for (int i = 0; i < weights.size(); ++i) {
    const Tensor t = weights.Get(i);
    if (t.dtype() != DType::kF32)
      return InvalidArgument("export: tensor '" + weights.name(i) + "' is not f32");
    host[i].resize(static_cast<size_t>(t.numel()));
    RETURN_IF_ERROR(Copy(Tensor(host[i].data(), DType::kF32, t.shape(), Device::kCpu), t));
    SafetensorsInput in{weights.name(i), DType::kF32, {}, host[i].data()};
    for (int d = 0; d < t.ndim(); ++d) in.shape.push_back(t.dim(d));
    inputs.push_back(std::move(in));
  }
  return WriteSafetensors(path, inputs, WeightsMetadata(config, tokenizer));
}

std::map<std::string, std::string> WeightsMetadata(const ModelConfig& config,
                                                   const std::string& tokenizer) {
  return {{"format", "ringtrain-gpt2"},
          {"n_layer", std::to_string(config.n_layer)},
          {"n_embd", std::to_string(config.n_embd)},
          {"n_head", std::to_string(config.n_head)},
          {"seq_len", std::to_string(config.seq_len)},
          {"vocab_size", std::to_string(config.vocab_size)},
          {"tokenizer", tokenizer}};
}

Status ImportWeights(const SafetensorsFile& file, const Arena& weights) {
  for (int i = 0; i < weights.size(); ++i) {
    const Tensor t = weights.Get(i);
    std::vector<int64_t> shape(t.shape().dims, t.shape().dims + t.ndim());
    ASSIGN_OR_RETURN(const SafetensorsEntry* e, file.Find(weights.name(i), shape));
    std::vector<float> values(static_cast<size_t>(t.numel()));
    const std::byte* src = e->data.data();
    switch (e->dtype) {
      case DType::kF32:
        std::memcpy(values.data(), src, values.size() * 4);
        break;
      case DType::kBF16:
      case DType::kF16:
        for (size_t k = 0; k < values.size(); ++k) {
          uint16_t h;
          std::memcpy(&h, src + 2 * k, 2);
          values[k] = e->dtype == DType::kBF16 ? FloatFromBf16(h) : FloatFromHalf(h);
        }
        break;
      default:
        return InvalidArgument(file.what + ": tensor '" + weights.name(i) + "' has dtype " +
                               std::string(DTypeName(e->dtype)) + ", expected a float type");
    }
    RETURN_IF_ERROR(Copy(t, Tensor(values.data(), DType::kF32, t.shape(), Device::kCpu)));
  }
  return Status();
}

Result<ModelConfig> WeightsConfig(const SafetensorsFile& file, std::string* tokenizer) {
  const auto get = [&](const std::string& key) -> Result<std::string> {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end())
      return InvalidArgument(file.what + ": metadata key '" + key +
                             "' is missing (not written by ringtrain export?)");
    return it->second;
  };
  const auto get_int = [&](const std::string& key, int* out) -> Status {
    ASSIGN_OR_RETURN(std::string text, get(key));
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
    if (ec != std::errc() || end != text.data() + text.size() || *out <= 0)
      return InvalidArgument(file.what + ": metadata '" + key + "' = '" + text +
                             "' is not a positive integer");
    return Status();
  };
  ModelConfig c;
  RETURN_IF_ERROR(get_int("n_layer", &c.n_layer));
  RETURN_IF_ERROR(get_int("n_embd", &c.n_embd));
  RETURN_IF_ERROR(get_int("n_head", &c.n_head));
  RETURN_IF_ERROR(get_int("seq_len", &c.seq_len));
  RETURN_IF_ERROR(get_int("vocab_size", &c.vocab_size));
  ASSIGN_OR_RETURN(*tokenizer, get("tokenizer"));
  if (c.n_embd % c.n_head != 0)
    return InvalidArgument(file.what + ": n_embd is not divisible by n_head");
  return c;
}

}  // namespace rt
