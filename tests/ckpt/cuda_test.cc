// Shards whose views are CUDA device memory: the writer snapshots them to the host and the
// reader fills them through host staging, re-sharding on the way (skips without a usable GPU).
#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "tests/ckpt/util.h"

namespace rt::ckpt {
namespace {

using testing::SynthLayout;
using testing::SynthRank;

// Moves every view of `rank` to device memory owned by `buffers` (same contents).
Status ToDevice(SynthRank& rank, std::vector<Buffer>& buffers) {
  for (TensorShard& s : rank.shards.shards) {
    ASSIGN_OR_RETURN(Buffer b, Buffer::Allocate(Device::kCuda, s.view.nbytes()));
    const Tensor device = b.View(s.dtype, Shape{s.view.numel()});
    RETURN_IF_ERROR(Copy(device, Tensor(s.view.data(), s.dtype, Shape{s.view.numel()})));
    s.view =
        s.global_shape.ndim == 0 ? Tensor(device.data(), s.dtype, Shape(), Device::kCuda) : device;
    buffers.push_back(std::move(b));
  }
  return Status();
}

TEST(CudaTest, DeviceShardsSaveAndLoadWithResharding) {
  if (!CheckDeviceAvailable(Device::kCuda).ok()) GTEST_SKIP() << "no usable CUDA device";
  auto storage = OpenStorage("mem://cuda").value();
  const SynthLayout from{.tp = 2, .dp = 2}, to{.tp = 1, .dp = 3, .zero = true, .columns = true};
  std::vector<SynthRank> ranks;
  std::vector<Buffer> buffers;
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < from.world(); ++r) {
    ranks.push_back(testing::MakeRank(from, r, true));
    ASSERT_TRUE(ToDevice(ranks.back(), buffers).ok());
    WriterOptions o;
    o.storage = storage;
    o.rank = r;
    o.world = from.world();
    o.run_id = "cuda";
    o.codec = Codec::kByteGroupedZstd;
    o.piece_bytes = 256;
    writers.push_back(CheckpointWriter::Create(o).value());
    ASSERT_TRUE(writers.back()->Save(1, ranks.back().shards, "").ok());
  }
  for (auto& w : writers) ASSERT_TRUE(w->Wait(Deadline::AfterMs(60000)).ok());
  for (int r = 0; r < to.world(); ++r) {
    SynthRank host = testing::MakeRank(to, r, false);
    SynthRank device = testing::MakeRank(to, r, false);
    std::vector<Buffer> device_buffers;
    ASSERT_TRUE(ToDevice(device, device_buffers).ok());
    auto reader = CheckpointReader::Open(storage, 1).value();
    Status s = reader->Load(device.shards);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (size_t i = 0; i < host.shards.shards.size(); ++i) {
      const TensorShard& h = host.shards.shards[i];
      const TensorShard& d = device.shards.shards[i];
      ASSERT_TRUE(Copy(Tensor(h.view.data(), h.dtype, Shape{h.view.numel()}),
                       Tensor(d.view.data(), d.dtype, Shape{d.view.numel()}, Device::kCuda))
                      .ok());
    }
    EXPECT_EQ(testing::CheckRank(host), "") << "rank " << r;
  }
}

}  // namespace
}  // namespace rt::ckpt
