// Fuzz target: the decoders of the values the etcd membership reads from etcd (a member, the view,
// the replicated state; any etcd client could have written them) must reject or accept any byte
// string without crashing, and what they accept must decode again, after re-encoding, to the same
// value.
#include <vector>

#include "elastic/membership/etcd_values.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rt::elastic::membership;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto m = DecodeMemberValue(text, "k"); m.ok()) {
    auto again = DecodeMemberValue(EncodeMemberValue(*m), "k");
    if (!again.ok() || !(*again == *m)) __builtin_trap();
  }
  if (auto v = DecodeViewValue(text, "k"); v.ok()) {
    auto again = DecodeViewValue(EncodeViewValue(*v), "k");
    if (!again.ok() || !(*again == *v)) __builtin_trap();
  }
  if (auto s = DecodeStateValue(text, "k"); s.ok()) {
    auto again = DecodeStateValue(EncodeStateValue(*s), "k");
    if (!again.ok() || !(*again == *s)) __builtin_trap();
  }
  return 0;
}

std::vector<std::vector<uint8_t>> FuzzSeeds() {
  using namespace rt::elastic;
  using namespace rt::elastic::membership;
  std::vector<std::vector<uint8_t>> seeds;
  auto add = [&](const std::string& s) { seeds.emplace_back(s.begin(), s.end()); };
  const Member a{1, "127.0.0.1:7001", 7}, b{2, "10.0.0.2:7700", 9};
  add(EncodeMemberValue(a));
  Member admitted_a = a,
         admitted_b = b;  // a view's members carry the generation that admitted them
  admitted_a.admitted = 1;
  admitted_b.admitted = 3;
  add(EncodeViewValue(View{3, {admitted_a, admitted_b}}));
  add(EncodeStateValue(ReplicatedState{2, std::string("job\0\xff", 5)}));
  return seeds;
}
