#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"
#include "model/rng.h"

namespace rt {

Result<std::vector<int32_t>> SampleTokens(Gpt& model, std::span<const int32_t> prompt,
                                          const SampleOptions& options) {
  if (prompt.empty()) return InvalidArgument("sample: the prompt is empty");
  const int V = model.config().vocab_size, T_max = model.config().seq_len;
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  std::vector<int32_t> generated;
  std::vector<float> logits(static_cast<size_t>(V));
  // The last row's logits come to the host in the model's dtype, then convert to f32 there.
  const DType dt = ComputeDType(model.precision());
  std::vector<std::byte> row(static_cast<size_t>(V) * DTypeSize(dt));
  std::vector<int32_t> order(static_cast<size_t>(V));
  Rng rng(options.seed);
  for (int i = 0; i < options.tokens; ++i) {
    const int T = std::min<int>(static_cast<int>(context.size()), T_max);
    std::span<const int32_t> window(context.data() + context.size() - T, T);
    RETURN_IF_ERROR(model.Forward(window, {}, 1, T, 0.0f).status());
    ASSIGN_OR_RETURN(Tensor last, model.logits().Rows(T - 1, 1));
    const Tensor host_row(row.data(), dt, {1, V}, Device::kCpu);
    RETURN_IF_ERROR(Copy(host_row, last));
    RETURN_IF_ERROR(Convert(Tensor(logits.data(), DType::kF32, {1, V}, Device::kCpu), host_row));
    int32_t next;
    if (options.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int k = options.top_k > 0 ? std::min(options.top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      const double max = logits[order[0]];
      std::vector<double> p(static_cast<size_t>(k));
      double total = 0;
      for (int j = 0; j < k; ++j)
        total += p[j] = std::exp((logits[order[j]] - max) / options.temperature);
      double u = rng.Uniform() * total;
      int j = 0;
      while (j < k - 1 && u >= p[j]) u -= p[j++];
      next = order[j];
    }
    generated.push_back(next);
    context.push_back(next);
  }
  return generated;
}

}  // namespace rt
