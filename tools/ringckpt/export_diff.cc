// ringckpt export and diff.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "model/safetensors.h"
#include "model/weights.h"
#include "tools/ringckpt/commands.h"

namespace ringckpt {

using rt::ckpt::StateKind;
using rt::ckpt::TensorEntry;

int Export(const Source& source, const std::string& out) {
  auto reader = OpenSource(source);
  if (!reader.ok()) return Fail(reader.status());
  const rt::ckpt::Manifest& m = (*reader)->manifest();
  // The fp32 master weights; a tensor without them (none in checkpoints of ringtrain, which
  // always store master) falls back to its parameters converted to fp32.
  std::map<std::string, const TensorEntry*> weights;
  for (const TensorEntry& t : m.tensors)
    if (t.kind == StateKind::kMaster) weights[t.name] = &t;
  for (const TensorEntry& t : m.tensors)
    if (t.kind == StateKind::kParam && !weights.contains(t.name)) weights[t.name] = &t;
  if (weights.empty())
    return Fail(rt::NotFound("checkpoint step " + std::to_string(m.step) + " holds no weights"));
  std::vector<std::vector<float>> data;
  std::vector<rt::SafetensorsInput> inputs;
  data.reserve(weights.size());
  for (const auto& [name, t] : weights) {
    auto values = LoadWhole(**reader, *t);
    if (!values.ok()) return Fail(values.status());
    data.emplace_back(values->begin(), values->end());
    rt::SafetensorsInput in;
    in.name = name;
    in.dtype = rt::DType::kF32;
    in.shape.assign(t->global_shape.dims, t->global_shape.dims + t->global_shape.ndim);
    in.data = data.back().data();
    inputs.push_back(std::move(in));
  }
  std::string config_text;
  auto config = ConfigOf(m, "", &config_text);
  if (!config.ok()) return Fail(config.status());
  std::map<std::string, std::string> metadata =
      rt::WeightsMetadata(config->model, config->model.vocab_size == 256 ? "byte" : "gpt2");
  metadata["step"] = std::to_string(m.step);
  metadata["run_id"] = m.run_id;
  if (rt::Status s = rt::WriteSafetensors(out, inputs, metadata); !s.ok()) return Fail(s);
  std::printf("wrote %zu tensors of step %lld to %s\n", inputs.size(),
              static_cast<long long>(m.step), out.c_str());
  return 0;
}

int Diff(const Source& a, const Source& b) {
  auto ra = OpenSource(a);
  if (!ra.ok()) return Fail(ra.status());
  auto rb = OpenSource(b);
  if (!rb.ok()) return Fail(rb.status());
  const auto& ma = (*ra)->manifest();
  const auto& mb = (*rb)->manifest();
  std::printf("A %s step %lld (%s), B %s step %lld (%s)\n", a.uri.c_str(),
              static_cast<long long>(ma.step), ma.layout.c_str(), b.uri.c_str(),
              static_cast<long long>(mb.step), mb.layout.c_str());
  std::printf("%-7s %-32s %14s %14s\n", "kind", "name", "max_abs", "max_rel");
  double worst = 0;
  for (const TensorEntry& ta : ma.tensors) {
    const TensorEntry* tb = mb.Find(ta.kind, ta.name);
    const char* kind = rt::ckpt::StateKindName(ta.kind);
    if (tb == nullptr) {
      std::printf("%-7s %-32s only in A\n", kind, ta.name.c_str());
      continue;
    }
    if (tb->global_shape != ta.global_shape) {
      std::printf("%-7s %-32s shapes differ: %s vs %s\n", kind, ta.name.c_str(),
                  ta.global_shape.ToString().c_str(), tb->global_shape.ToString().c_str());
      continue;
    }
    auto va = LoadWhole(**ra, ta);
    if (!va.ok()) return Fail(va.status());
    auto vb = LoadWhole(**rb, *tb);
    if (!vb.ok()) return Fail(vb.status());
    double max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < va->size(); ++i) {
      const double d = std::fabs((*va)[i] - (*vb)[i]);
      const double scale = std::max(std::fabs((*va)[i]), std::fabs((*vb)[i]));
      max_abs = std::max(max_abs, d);
      if (scale > 0) max_rel = std::max(max_rel, d / scale);
    }
    worst = std::max(worst, max_abs);
    std::printf("%-7s %-32s %14.6g %14.6g\n", kind, ta.name.c_str(), max_abs, max_rel);
  }
  for (const TensorEntry& tb : mb.tensors)
    if (ma.Find(tb.kind, tb.name) == nullptr)
      std::printf("%-7s %-32s only in B\n", rt::ckpt::StateKindName(tb.kind), tb.name.c_str());
  std::printf("largest absolute difference %.6g\n", worst);
  return 0;
}

}  // namespace ringckpt
