#include "parallel/stage_layout.h"

#include "model/gpt.h"

namespace rt::parallel {

int64_t StageLayout::num_params() const {
  int64_t n = 0;
  for (const StageTensor& t : tensors) n += t.shape.numel();
  return n;
}

int StageLayout::layers() const {
  int n = 0;
  for (const StageChunk& c : chunks) n += c.layers();
  return n;
}

int StageFirstLayer(int n_layer, int stages, int stage) {
  // Every stage gets n_layer / stages blocks; the remainder goes one each to stages 1, 2, ...,
  // stages-2 (the middle, which runs neither the embedding nor the head), then 0, then the last.
  std::vector<int> counts(static_cast<size_t>(stages), n_layer / stages);
  std::vector<int> order;
  for (int s = 1; s + 1 < stages; ++s) order.push_back(s);
  order.push_back(0);
  if (stages > 1) order.push_back(stages - 1);
  for (int i = 0; i < n_layer % stages; ++i)
    ++counts[static_cast<size_t>(order[static_cast<size_t>(i)])];
  int first = 0;
  for (int s = 0; s < stage; ++s) first += counts[static_cast<size_t>(s)];
  return first;
}

StageLayout BuildStageLayout(const ModelConfig& m, int stages, int stage, int shards, int tp,
                             int tp_rank, int virtual_stages) {
  StageLayout l;
  l.tp = tp;
  l.tp_rank = tp_rank;
  l.stage = stage;
  l.stages = stages;
  l.shards = shards;
  const int virtual_total = stages * virtual_stages;
  for (int c = 0; c < virtual_stages; ++c) {
    StageChunk chunk;
    chunk.virtual_stage = c * stages + stage;
    const int vs = chunk.virtual_stage;
    chunk.first_layer = StageFirstLayer(m.n_layer, virtual_total, vs);
    chunk.end_layer =
        vs + 1 == virtual_total ? m.n_layer : StageFirstLayer(m.n_layer, virtual_total, vs + 1);
    chunk.has_embedding = vs == 0;
    chunk.has_head = vs + 1 == virtual_total;
    l.chunks.push_back(chunk);
  }
  l.has_embedding = stage == 0;
  l.has_head = stage == stages - 1;
  const int64_t C = m.n_embd, V = m.vocab_size, T = m.seq_len;
  int64_t at = 0;
  // Adds a tensor of global shape `global` of which this rank holds `boxes` (the local tensor
  // is their concatenation; a replicated tensor is one box covering it all).
  auto add_boxes = [&](std::string name, Shape global, bool tied_copy,
                       std::vector<TensorBox> boxes) {
    StageTensor t;
    t.name = std::move(name);
    t.global_shape = global;
    t.tp_sharded = !boxes.empty();
    if (boxes.empty()) boxes.push_back(TensorBox{Shape(), global, 0});
    int64_t local = 0;
    for (TensorBox& b : boxes) {
      if (b.offset.ndim == 0) {
        b.offset = global;
        for (int d = 0; d < global.ndim; ++d) b.offset.dims[d] = 0;
      }
      b.local_begin = local;
      local += b.size.numel();
    }
    t.boxes = std::move(boxes);
    // Local shape: rows stacked when boxes split rows, else the single box's shape.
    t.shape = t.boxes.front().size;
    if (t.boxes.size() > 1) t.shape.dims[0] = local / (t.shape.ndim == 2 ? t.shape.dims[1] : 1);
    t.offset = at;
    t.unit = static_cast<int>(l.units.size()) - 1;
    t.tied_copy = tied_copy;
    t.decayed = IsDecayed(global);
    at += t.shape.numel();
    l.units.back().tensors.push_back(static_cast<int>(l.tensors.size()));
    l.tensors.push_back(std::move(t));
  };
  auto add = [&](std::string name, Shape shape, bool tied_copy) {
    add_boxes(std::move(name), shape, tied_copy, {});
  };
  // Rows [r·rows/tp, ...) of each of `parts` equal row blocks of a [parts·rows, cols] tensor
  // (cols = 0 for 1-D).
  auto row_split = [&](int64_t parts, int64_t rows, int64_t cols) {
    std::vector<TensorBox> boxes;
    if (tp == 1) return boxes;
    const int64_t n = rows / tp;
    for (int64_t j = 0; j < parts; ++j) {
      const int64_t first = j * rows + tp_rank * n;
      boxes.push_back(cols ? TensorBox{Shape{first, 0}, Shape{n, cols}, 0}
                           : TensorBox{Shape{first}, Shape{n}, 0});
    }
    return boxes;
  };
  // Columns [r·cols/tp, ...) of a [rows, cols] tensor.
  auto col_split = [&](int64_t rows, int64_t cols) {
    std::vector<TensorBox> boxes;
    if (tp == 1) return boxes;
    const int64_t n = cols / tp;
    boxes.push_back(TensorBox{Shape{0, tp_rank * n}, Shape{rows, n}, 0});
    return boxes;
  };
  auto close_unit = [&] {
    StageUnit& u = l.units.back();
    at = u.begin + (at - u.begin + shards - 1) / shards * shards;
    u.size = at - u.begin;
  };
  // The tied embedding is a unit of its own on both end stages, so both copies are padded,
  // sharded and reduced identically and stay bitwise equal.
  if (l.has_embedding || l.has_head) {
    l.units.push_back(StageUnit{at, 0, -1, {}});
    add_boxes("wte", {V, C}, !l.has_embedding, row_split(1, V, C));
    close_unit();
    l.units.push_back(StageUnit{at, 0, -1, {}});
    if (l.has_embedding) add("wpe", {T, C}, false);
    if (l.has_head) {
      add("ln_f.weight", {C}, false);
      add("ln_f.bias", {C}, false);
    }
    close_unit();
  }
  l.aux_units = static_cast<int>(l.units.size());
  for (StageChunk& chunk : l.chunks) {
    chunk.first_unit = static_cast<int>(l.units.size());
    for (int layer = chunk.first_layer; layer < chunk.end_layer; ++layer) {
      StageUnit u;
      u.begin = at;
      u.layer = layer;
      l.units.push_back(u);
      const std::string h = "h." + std::to_string(layer) + ".";
      add(h + "ln_1.weight", {C}, false);
      add(h + "ln_1.bias", {C}, false);
      add_boxes(h + "attn.c_attn.weight", {3 * C, C}, false, row_split(3, C, C));
      add_boxes(h + "attn.c_attn.bias", {3 * C}, false, row_split(3, C, 0));
      add_boxes(h + "attn.c_proj.weight", {C, C}, false, col_split(C, C));
      add(h + "attn.c_proj.bias", {C}, false);
      add(h + "ln_2.weight", {C}, false);
      add(h + "ln_2.bias", {C}, false);
      add_boxes(h + "mlp.c_fc.weight", {4 * C, C}, false, row_split(1, 4 * C, C));
      add_boxes(h + "mlp.c_fc.bias", {4 * C}, false, row_split(1, 4 * C, 0));
      add_boxes(h + "mlp.c_proj.weight", {C, 4 * C}, false, col_split(C, 4 * C));
      add(h + "mlp.c_proj.bias", {C}, false);
      close_unit();
    }
  }
  l.total = at;
  return l;
}

}  // namespace rt::parallel
